"""What each strategy must leave in the ranks' evidence (evidence.py) for the model of
parallel_scenarios.py, so a strategy that silently did not apply fails even where its numbers agree
with one process (plain DDP reaches the same ones). Used by test_equivalence.py and the e2e jobs
(tests/e2e/test_parallel_jobs.py)."""

from __future__ import annotations

import math

import parallel_scenarios as sc

LAYERS = ["0", "1", "2", "3", "4"]
# pipeline_parallel_degree=2: the stages' layers (equal counts, the first stage takes the extra one)
STAGES = [["0", "1", "2"], ["3", "4"]]
# The dimension tensor parallelism slices: column-parallel 0 pairs with row-parallel 2 (an MLP), 4 is
# column-parallel alone; 2.bias is replicated, added once after the row-parallel sum.
TP_SLICED = {"0.weight": 0, "0.bias": 0, "2.weight": 1, "4.weight": 0, "4.bias": 0}
INITIAL_SCALE = 2.0 ** 16  # GradScaler's
SHAPES = {name: list(p.shape) for name, p in sc.model().named_parameters()}


def _local_shape(parameters: dict, name: str) -> list[int]:
    shape = list(SHAPES[name])
    if name in TP_SLICED:
        shape[TP_SLICED[name]] //= parameters.get("tensor_parallel_degree", 1)
    shape[0] //= parameters.get("hybrid_shard_degree") or 1  # FSDP shards dim 0 of what TP left
    return shape


def _mesh(parameters: dict, dp: int) -> dict[str, int] | None:
    tp, degree = parameters.get("tensor_parallel_degree", 1), parameters.get("hybrid_shard_degree")
    if tp > 1:
        return {"dp": dp, "tp": tp} if degree else {"tp": tp}
    if degree:
        return {"shard": degree} if degree == dp else {"replicate": dp // degree, "shard": degree}
    return None


def assert_applied(parameters: dict, reports: list[dict], steps: int, adam: bool = True) -> None:
    """`reports`: every rank's evidence, by rank, after `steps` optimizer steps."""
    p = parameters.get
    pp, tp = p("pipeline_parallel_degree", 1), p("tensor_parallel_degree", 1)
    dp = len(reports) // (pp * tp)
    micro_batches = steps * p("gradient_accumulation_steps", 1)
    for rank, r in enumerate(reports):
        where = f"rank {rank}"
        layers = STAGES[r["pipeline"]["stage"]] if pp > 1 else LAYERS
        held = [name for name in SHAPES if name.split(".")[0] in layers]
        assert sorted(r["params"]) == sorted(held), where
        skipped = 0
        if p("fp16"):
            # The loss was scaled; a step whose scaled gradients overflowed is skipped and halves the scale.
            scaler = r["scaler"]
            skipped = round(math.log2(INITIAL_SCALE / scaler["scale"]))
            assert scaler["scaled"] and 0 < scaler["good_steps"] <= steps - skipped, (where, scaler)
        else:
            assert r["scaler"] is None, where
        # gradient accumulation: a real optimizer step and one gradient sync per K micro-batches
        assert (r["micro_batches"], r["optimizer_steps"]) == (micro_batches, steps - skipped), where
        assert r["synced"] == (steps if dp > 1 and pp == 1 else 0), where
        # in a micro-batch, every layer ran once (per pipeline micro-batch), twice when checkpointing
        # recomputed it during backward
        calls = (p("microbatches", 1) if pp > 1 else 1) * (2 if p("activation_checkpointing") else 1)
        assert r["forward_calls"] == dict.fromkeys(layers, calls), where
        assert r["checkpointed"] == (layers if p("activation_checkpointing") else []), where
        dtype = "torch.bfloat16" if p("bf16") else "torch.float16" if p("fp16") else "torch.float32"
        assert r["output_dtypes"] == [dtype], where
        offloaded = r["offloaded"]
        if p("sm_activation_offloading"):  # at least each layer's input, every micro-batch, all to CPU
            packed = offloaded.get("packed", 0)
            assert packed == offloaded["unpacked"] >= len(layers) * micro_batches, (where, offloaded)
            assert packed == sum(n for k, n in offloaded.items() if k.endswith(" to cpu")), (where, offloaded)
        else:
            assert offloaded == {}, where
        # sharding: parameters, gradients and (Adam's two) optimizer state tensors per rank
        local = {name: _local_shape(parameters, name) for name in held}
        assert {n: e["local"] for n, e in r["params"].items()} == local, where
        assert r["grads"] == local, where
        assert all(e["mesh"] == _mesh(parameters, dp) for e in r["params"].values()), (where, r["params"])
        if adam and not p("shard_optimizer_state"):
            assert r["optimizer_state"] == {n: [shape, shape] for n, shape in local.items()}, where
    if pp > 1:  # each stage on dp ranks
        assert sorted(r["pipeline"]["stage"] for r in reports) == sorted(list(range(pp)) * dp)
    if adam and p("shard_optimizer_state"):
        # ZeRO-1: each rank keeps the whole state of its own part of the parameters, no two the same
        owned = [sorted(r["optimizer_state"]) for r in reports]
        assert all(owned) and sorted(name for names in owned for name in names) == sorted(SHAPES), owned
        for r in reports:
            assert all(state == [SHAPES[n]] * 2 for n, state in r["optimizer_state"].items())
