"""A built-in algorithm's image (spec/images.py): every instance runs the algorithm (`python -m
shipyard.algorithms NAME`, shipyard/algorithms), which finds the other instances itself from resourceconfig.json,
as SageMaker's algorithm containers do. The leader's address and the job's own port are given as
MASTER_ADDR and MASTER_PORT, for what the algorithm starts there (XGBoost's tracker)."""

from __future__ import annotations

from shipyard.runtime.launchers.base import LaunchContext, LaunchPlan


class BuiltInAlgorithm:
    name = "algorithm"
    priority = 0

    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm

    def enabled(self, env) -> bool:
        return True

    def plan(self, env, ctx: LaunchContext) -> LaunchPlan:
        return LaunchPlan(argv=[ctx.python, "-m", "shipyard.algorithms", self.algorithm],
                          env={"MASTER_ADDR": ctx.address(env.hosts[0]), "MASTER_PORT": str(ctx.master_port)})
