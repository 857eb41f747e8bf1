"""TreeDepth (XGBoost): the depth of the model's trees from the largest node id in the `trees` collection, as
SageMaker defines it (log2 of the largest node id; here floor(log2(id + 1)), the level of node `id` when a
tree's nodes are numbered level by level from the root, 0, as XGBoost's depthwise growth numbers them).
SageMaker does not say which way the comparison with `depth` goes: by default it fires when the trees grow
deeper than `depth`; `fire_when=shallower` fires when they stay shallower (XGBoost rejected the splits that
would have reached it)."""

from __future__ import annotations

import math

from shipyard.rules.debugger.base import Rule, tensors_at
from shipyard.spec.rule_parameters import Parameter

PARAMETERS = {
    "depth": Parameter("int", 4, "the tree depth compared with"),
    "fire_when": Parameter("str", "deeper", "deeper: fire when a tree is deeper than depth; shallower: when the "
                                            "deepest tree is shallower than depth"),
}
COLLECTIONS = {"trees": {"save_interval": "5"}}


def depth_of(largest_node_id: int) -> int:
    """The level of node `largest_node_id` in a binary tree numbered breadth-first from 0 (the root: 0)."""
    return int(math.floor(math.log2(largest_node_id + 1)))


class TreeDepth(Rule):
    def __init__(self, base_trial, **parameters) -> None:
        if parameters.get("fire_when", "deeper") not in ("deeper", "shallower"):
            raise ValueError(f"fire_when must be 'deeper' or 'shallower', not {parameters['fire_when']!r}")
        super().__init__(base_trial, **parameters)

    def invoke_at_step(self, step: int) -> bool:
        p = self.parameters
        names = tensors_at(self.base_trial, step, None, r"^trees/Node$")
        if not names:
            return False
        depth = depth_of(int(self.base_trial.tensor(names[0]).value(step).max()))
        fired = depth > p["depth"] if p["fire_when"] == "deeper" else depth < p["depth"]
        if fired:
            self.finding = f"the trees are {depth} levels deep, {p['fire_when']} than depth={p['depth']}"
        return fired


RULE = TreeDepth
