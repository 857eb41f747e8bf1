"""`multi_worker_mirrored_strategy`: the script runs once per instance as a plain process, as the
TensorFlow toolkit runs it, with `TF_CONFIG` naming every instance a worker (spec 2.10). Ports are the
job's own (see tf_config)."""

from __future__ import annotations

import json

from shipyard.runtime import entry_point
from shipyard.runtime.launchers import tf_config
from shipyard.runtime.launchers.base import LaunchContext, LaunchPlan


class MultiWorkerMirrored:
    name = "multi_worker_mirrored_strategy"
    # It only adds TF_CONFIG to the toolkit's plain process: below every launcher that picks a runner.
    priority = 10
    flag = "sagemaker_multi_worker_mirrored_strategy_enabled"

    def enabled(self, env) -> bool:
        return bool(env.additional_framework_parameters.get(self.flag))

    def plan(self, env, ctx: LaunchContext) -> LaunchPlan:
        hosts = env.distribution_hosts or env.hosts
        config = tf_config.multi_worker_mirrored(hosts, env.current_host, ctx.address, ctx.master_port)
        argv = entry_point.command(env.layout.code_dir, env.user_entry_point, env.user_args, ctx.python)
        return LaunchPlan(argv=argv, env={"TF_CONFIG": json.dumps(config)})
