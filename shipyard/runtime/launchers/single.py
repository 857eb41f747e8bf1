"""No distribution: one process per instance, as the toolkit's ProcessRunner starts it."""

from __future__ import annotations

from shipyard.runtime import entry_point
from shipyard.runtime.launchers.base import LaunchContext, LaunchPlan


class SingleProcess:
    name = "single"
    priority = 0

    def enabled(self, env) -> bool:
        return True

    def plan(self, env, ctx: LaunchContext) -> LaunchPlan:
        argv = entry_point.command(env.layout.code_dir, env.user_entry_point, env.user_args, ctx.python)
        return LaunchPlan(argv=argv)
