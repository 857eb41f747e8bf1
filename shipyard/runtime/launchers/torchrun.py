"""torchrun on every instance, as the toolkit's TorchDistributedRunner starts it: nnodes, nproc_per_node,
node_rank from the host's place in distribution_hosts, the leader's address and port.

Two deliberate differences from the toolkit: the port is the job's own (several jobs share this
machine's network, so a fixed 7777 would collide), and it is passed for one node too (torchrun's
default 29500 would collide the same way).

Where each process listens (docs/contract.md, "Network listeners"): the rendezvous store on the leader's
address (shipyard.runtime.bind), gloo where the host name resolves. In a sandbox that name is the
instance's own; outside one it is this machine's, which may resolve to an outside address, so instances
on loopback addresses give gloo their interface instead (GLOO_SOCKET_IFNAME, as NCCL_SOCKET_IFNAME).

With several processes per host, torchrun labels each one's lines (`algo-1[1] | ...`, base.rank_label):
its --tee writes every process's stdout and stderr to files of their own (kept in the instance directory,
whole even should torchrun be killed) and copies their lines, prefixed, to the host log. It is set through
torchrun's environment (PET_* are its options), so the command line stays the toolkit's."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from shipyard.errors import ValidationError
from shipyard.runtime.launchers.base import (
    LABEL_SEPARATOR,
    LaunchContext,
    LaunchPlan,
    processes_per_host,
    rank_label,
)


class TorchDistributed:
    name = "torch_distributed"
    priority = 30
    flag = "sagemaker_torch_distributed_enabled"

    def enabled(self, env) -> bool:
        return bool(env.additional_framework_parameters.get(self.flag))

    def plan(self, env, ctx: LaunchContext) -> LaunchPlan:
        entry = env.user_entry_point
        if not entry.endswith(".py"):
            raise ValidationError("entry_point", entry, f"{self.name} runs Python programs only; use a .py file")
        hosts = env.distribution_hosts or env.hosts
        master = ctx.address(env.master_hostname)
        processes = processes_per_host(env)
        argv = [
            ctx.python, "-m", "torch.distributed.run",
            "--nnodes", str(len(hosts)),
            "--nproc_per_node", str(processes),
            "--master_addr", master,
            "--master_port", str(ctx.master_port),
            "--node_rank", str(hosts.index(env.current_host)),
            entry, *env.user_args,
        ]
        iface = env.network_interface_name
        plan_env = {
            "MASTER_ADDR": master,
            "MASTER_PORT": str(ctx.master_port),
            "NCCL_SOCKET_IFNAME": iface,
            "NCCL_PROTO": "simple",
        }
        if not ctx.sandboxed and _is_loopback(ctx.host_addresses[env.current_host]):
            plan_env["GLOO_SOCKET_IFNAME"] = iface
        if not env.num_gpus:
            # Accelerate (under transformers' Trainer) joins torchrun's processes on a GPU-less instance only
            # when told it is on the CPU; otherwise each process trains alone, unaware of the others.
            plan_env["ACCELERATE_USE_CPU"] = "true"
        if processes > 1:
            label = rank_label(env.current_host, "${local_rank}") + LABEL_SEPARATOR
            plan_env.update({"PET_TEE": "3", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": label})   # 3: stdout, stderr
            if ctx.instance_dir:   # else torchrun's own temporary directory
                plan_env["PET_LOG_DIR"] = str(Path(ctx.instance_dir) / "torchrun")
        leader = env.current_host == hosts[0]
        return LaunchPlan(argv=argv, env=plan_env, wait_for=None if leader else (master, ctx.master_port))


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # a Ray node's placeholder before placement
        return False


class PyTorchDDP(TorchDistributed):
    """`pytorchddp` is served by torchrun too (SageMaker routes it to mpirun/smddprun, which needs SSH
    between instances; torchrun gives the script the same process group with nothing to set up)."""

    name = "pytorchddp"
    priority = 40
    flag = "sagemaker_pytorch_ddp_enabled"
