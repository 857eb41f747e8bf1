"""`parameter_server`, as the TensorFlow toolkit runs it (spec 2.9): on more than one instance only;
every instance runs a parameter server beside the script, and the script runs once per instance with
`TF_CONFIG` naming the first host `master`, the others `worker`s and every host a `ps`.

The parameter server is a sidecar of the plan (the agent starts it before the script and stops it
after); `python -m shipyard.runtime.launchers.parameter_server` is that server. As the toolkit's
`_wait_until_master_is_down`, a non-leader keeps its parameter server up after its own script ends
until the master's task is down, since the master may still be using it. Ports are the job's own
(see tf_config)."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

from shipyard.runtime import entry_point
from shipyard.runtime.launchers import tf_config
from shipyard.runtime.launchers.base import LaunchContext, LaunchPlan

# How often a stopping parameter server asks whether the master is down (the toolkit: 10 s).
MASTER_POLL_SECONDS = 1.0


class ParameterServer:
    name = "parameter_server"
    priority = 60  # the TF toolkit checks it before mpi (spec 2.3)
    flag = "sagemaker_parameter_server_enabled"

    def enabled(self, env) -> bool:
        return bool(env.additional_framework_parameters.get(self.flag)) and len(env.distribution_hosts) > 1

    def plan(self, env, ctx: LaunchContext) -> LaunchPlan:
        hosts = env.distribution_hosts or env.hosts
        worker = tf_config.parameter_server(hosts, env.current_host, ctx.address, ctx.master_port)
        ps = tf_config.parameter_server(hosts, env.current_host, ctx.address, ctx.master_port, ps_task=True)
        server = LaunchPlan(
            argv=[ctx.python, "-m", __name__],
            env={"TF_CONFIG": json.dumps(ps), "CUDA_VISIBLE_DEVICES": ""},  # the toolkit hides GPUs from it
            name=f"parameter server ps:{ps['task']['index']}",
        )
        argv = entry_point.command(env.layout.code_dir, env.user_entry_point, env.user_args, ctx.python)
        return LaunchPlan(argv=argv, env={"TF_CONFIG": json.dumps(worker)}, sidecars=[server])


def is_up(endpoint: str) -> bool:
    """Whether a task's gRPC port accepts connections (also used by scripts that wait for the chief)."""
    host, _, port = endpoint.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError:
        return False
    return True


def serve() -> int:
    """Run this instance's parameter server (the task in TF_CONFIG) until SIGTERM or SIGINT."""
    stop = {signal.SIGTERM, signal.SIGINT}
    # Blocked before TensorFlow starts its threads, so the signal waits for sigwait below instead of
    # killing the process from whichever thread it lands on.
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    config = json.loads(os.environ["TF_CONFIG"])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow as tf

    task = config["task"]
    # It binds every interface: TensorFlow's gRPC server takes no bind address (docs/contract.md).
    tf.distribute.Server(
        tf.train.ClusterSpec(config["cluster"]), job_name="ps", task_index=task["index"],
        config=tf.compat.v1.ConfigProto(device_count={"GPU": 0}), start=True,
    )
    print(f"parameter server ps:{task['index']} listening on {config['cluster']['ps'][task['index']]}", flush=True)
    signal.sigwait(stop)
    if task["index"] != 0:  # ps:0 is on the master's own host
        while is_up(config["cluster"]["master"][0]):
            time.sleep(MASTER_POLL_SECONDS)
    return 0


if __name__ == "__main__":
    sys.exit(serve())
