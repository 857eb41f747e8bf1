"""`mpi`: one mpirun on the leader starts every rank of every instance, as the toolkit's MPI runner does
(spec 2.6): the same fixed flags, `-np` P x hosts over `--host algo-1:P,...`, `-x` for the toolkit's
variables, `custom_mpi_options` appended verbatim, then `python -m mpi4py <entry> <args>` (mpi4py so
that an uncaught exception in one rank aborts the whole world).

SageMaker's mpirun reaches the workers over SSH. Instances here have no SSH, so mpirun's remote agent
(`plm_rsh_agent`) is shipyard's own `mpi.rsh`: it hands the `orted` command line mpirun wants started on
`algo-N` to that instance, whose `mpi.worker` (the workers' launch, in place of the entry point) starts
it inside its own sandbox with its own environment, so every rank lives in its instance: host name,
/opt/ml, SM_CURRENT_HOST and site-packages are that instance's. mpi.rsh leaves the command in the
leader's files (`mpi.rendezvous`); the workers, which may be on other hosts (Ray), ask for it over the
network: the leader serves them a mailbox (`mpi.mailbox`) on its own address, at the last port of the
job's span (MAILBOX_PORT_ENV), signed with the job's secret. The leader's launch is `mpi.leader` around
the exact mpirun command: it relays mpirun's output with the toolkit's `[1,mpirank:R,algo-K]` tags, names
the rank and host that failed first, and tells the workers mpirun is done. Only the leader's exit code
carries the script's status; workers exit 0 once the leader is done.

Where we differ from the toolkit, and why:
- btl `self,vader,tcp`, and for both interfaces `lo` locally (instances are loopback addresses on one
  machine) or, on Ray, the network of the nodes' addresses (e.g. `10.0.1.0/24`): interface names may
  differ between hosts, a subnet is the same on all of them. That picks the addresses OpenMPI connects
  to; it still listens on the wildcard ones, which no parameter changes (docs/contract.md, "Network
  listeners").
- Per-instance variables (SM_CURRENT_HOST, SM_TRAINING_ENV, SM_NETWORK_INTERFACE_NAME, ...) are not
  `-x`-exported: the toolkit's export gives every rank the leader's values, here each rank sees its own
  instance's. So is NCCL_SOCKET_IFNAME, set in every instance's environment rather than exported. The
  LD_PRELOAD gethostname shim is not needed (the sandbox's host name already is algo-N), and
  LD_LIBRARY_PATH / credentials are not exported (every instance's orted starts with the job's full
  environment on this machine).
- MASTER_ADDR (the leader) and MASTER_PORT (the job's own port) are set on every instance, so
  Horovod-style scripts can start torch.distributed from the OMPI_COMM_WORLD_* variables.
- mpi needs the instance sandboxes: without them every instance has this machine's host name and
  mpirun could not tell them apart."""

from __future__ import annotations

from shipyard.errors import ValidationError
from shipyard.runtime import entry_point
from shipyard.runtime.launchers.base import LaunchContext, LaunchPlan, processes_per_host
from shipyard.runtime.launchers.tf_config import port_span
from shipyard.runtime.mpi import PORT_ENV as MAILBOX_PORT_ENV
from shipyard.spec.distribution import split_mpi_options

# The toolkit's fixed options after `--host` and `-np` (spec 2.6).
FIXED_OPTIONS = ("--allow-run-as-root", "--display-map", "--tag-output")
RSH_AGENT_MODULE = "shipyard.runtime.mpi.rsh"
# Variables whose value is the instance's own; every other toolkit variable is exported with -x.
PER_INSTANCE_VARS = frozenset({
    "CURRENT_HOST", "SM_CURRENT_HOST", "SM_CURRENT_INSTANCE_TYPE", "SM_CURRENT_INSTANCE_GROUP",
    "SM_CURRENT_INSTANCE_GROUP_HOSTS", "SM_RESOURCE_CONFIG", "SM_TRAINING_ENV",
    "SM_NUM_CPUS", "SM_NUM_GPUS", "SM_NUM_NEURONS", "SM_NETWORK_INTERFACE_NAME",
})


def mailbox_port(master_port: int, host_count: int) -> int:
    """The last port of the job's span: the first ones are TensorFlow's MWMS tasks, which may run under
    mpirun (tf_config), and master_port is torch.distributed's under Horovod-style scripts."""
    return master_port + port_span(host_count) - 1


def _nccl_debug(tokens: list[str]) -> tuple[str, list[str]]:
    """The toolkit's one known option: `--NCCL_DEBUG X` (or `=X`) sets NCCL_DEBUG (default INFO)."""
    level, rest, i = "INFO", [], 0
    while i < len(tokens):
        token = tokens[i]
        if token == "--NCCL_DEBUG" and i + 1 < len(tokens):
            level, i = tokens[i + 1], i + 2
            continue
        if token.startswith("--NCCL_DEBUG="):
            level = token.partition("=")[2]
        else:
            rest.append(token)
        i += 1
    return level, rest


class MPI:
    name = "mpi"
    priority = 50  # the PyTorch toolkit checks mpi first (spec 2.3)
    flag = "sagemaker_mpi_enabled"

    def enabled(self, env) -> bool:
        return bool(env.additional_framework_parameters.get(self.flag))

    def plan(self, env, ctx: LaunchContext) -> LaunchPlan:
        if not ctx.sandboxed:
            raise ValidationError("distribution.mpi", "enabled",
                                  "mpi needs instance sandboxes (bubblewrap) so that each instance has its own "
                                  "host name; install bubblewrap (`make setup`) and leave SHIPYARD_SANDBOX unset")
        params = env.additional_framework_parameters
        tokens = split_mpi_options(params.get("sagemaker_mpi_custom_mpi_options", ""))
        master = ctx.address(env.master_hostname)
        plan_env = {
            "MASTER_ADDR": master,
            "MASTER_PORT": str(ctx.master_port),
            MAILBOX_PORT_ENV: str(mailbox_port(ctx.master_port, len(env.hosts))),
            "NCCL_SOCKET_IFNAME": env.network_interface_name,
            # OpenMPI refuses root without these (CI and containers run as root).
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        }
        if not env.is_master:
            return LaunchPlan(argv=[ctx.python, "-m", "shipyard.runtime.mpi.worker"], env=plan_env)
        return LaunchPlan(argv=[ctx.python, "-m", "shipyard.runtime.mpi.leader", *self.mpirun(env, ctx, tokens)],
                          env=plan_env)

    def mpirun(self, env, ctx: LaunchContext, tokens: list[str]) -> list[str]:
        if " " in ctx.python:
            raise ValidationError("python", ctx.python, "mpirun splits its remote agent command on spaces; "
                                  "run shipyard from a Python whose path has no spaces")
        hosts = env.distribution_hosts or env.hosts
        per_host = processes_per_host(env)
        processes = env.additional_framework_parameters.get("sagemaker_mpi_num_processes") or per_host * len(hosts)
        host_list = hosts if per_host == 1 else [f"{host}:{per_host}" for host in hosts]
        network = ctx.network_subnet or env.network_interface_name
        nccl_debug, tokens = _nccl_debug(tokens)
        argv = [
            "mpirun", "--host", ",".join(host_list), "-np", str(processes), *FIXED_OPTIONS,
            "-mca", "btl_tcp_if_include", network,
            "-mca", "oob_tcp_if_include", network,
            "-mca", "plm_rsh_no_tree_spawn", "1",
            "-bind-to", "none", "-map-by", "slot",
            "-mca", "pml", "ob1",
            "-mca", "btl", "self,vader,tcp",
            "-mca", "orte_abort_on_non_zero_status", "1",
            "-mca", "btl_vader_single_copy_mechanism", "none",
            "-mca", "plm_rsh_agent", f"{ctx.python} -m {RSH_AGENT_MODULE}",
            "-x", "NCCL_MIN_NRINGS=4",
            "-x", f"NCCL_DEBUG={nccl_debug}",
            "-x", "PATH",
            *tokens,
        ]
        for name in env.to_env_vars():
            if name not in PER_INSTANCE_VARS:
                argv += ["-x", name]
        program = entry_point.command(env.layout.code_dir, env.user_entry_point, env.user_args, ctx.python)
        if program[0] == ctx.python:  # Python programs and packages run under mpi4py; commands as they are
            program = [ctx.python, "-m", "mpi4py", *program[1:]]
        return argv + program
