"""Mathematical equivalence: every strategy trained on N gloo ranks (CPU) through shipyard.parallel ends
with the parameters of the same model trained in one process on the same global batches (per-scenario
tolerances in parallel_scenarios.py), and each strategy visibly applied on every rank (applied.py): plain
DDP would reach the same numbers. Each world size is one set of processes running every scenario."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import parallel_scenarios as sc  # noqa: E402
pytest.register_assert_rewrite("applied")  # its failures show the values compared
from applied import assert_applied  # noqa: E402
from ranks import run_ranks  # noqa: E402

pytestmark = pytest.mark.slow
WORKER = str(Path(__file__).parent / "worker.py")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """world size -> the output directory of one run of all that world size's scenarios."""
    done: dict[int, Path] = {}

    def get(world: int) -> Path:
        if world not in done:
            out = tmp_path_factory.mktemp(f"world{world}")
            names = [s.name for s in sc.SCENARIOS if s.world == world]
            run_ranks(world, [WORKER, str(out), *names], out)
            done[world] = out
        return done[world]

    return get


@pytest.mark.parametrize("name", [s.name for s in sc.SCENARIOS])
def test_strategy_matches_single_process(trained, name):
    scenario = sc.BY_NAME[name]
    out = trained(scenario.world)
    expected = sc.reference(scenario)
    ranks = [torch.load(out / f"{name}-rank{r}.pt") for r in range(scenario.world)]
    if scenario.get("pipeline_parallel_degree", 1) > 1:  # each rank holds its stage's layers
        assert set().union(*ranks) == set(expected) and all(set(state) < set(expected) for state in ranks)
    else:
        assert all(set(state) == set(expected) for state in ranks), [sorted(state) for state in ranks]
    for rank, state in enumerate(ranks):
        for key, value in state.items():
            difference = (value.float() - expected[key]).abs().max().item()
            assert difference <= scenario.tolerance, f"{name} rank {rank} {key}: off by {difference:.3g}"
    # the model really moved: a broken optimizer step would also "agree" with an unchanged reference
    assert any((v - sc.model().state_dict()[k]).abs().max() > 1e-3 for k, v in expected.items())


@pytest.mark.parametrize("name", [s.name for s in sc.SCENARIOS])
def test_strategy_applied(trained, name):
    scenario = sc.BY_NAME[name]
    out = trained(scenario.world)
    reports = [json.loads((out / f"{name}-rank{r}.json").read_text()) for r in range(scenario.world)]
    assert_applied(scenario.parameters, reports, sc.STEPS, adam=scenario.optimizer == "adam")
