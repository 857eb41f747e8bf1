"""Budgets end to end (docs/planner.md): a job with `max_cost` on a priced instance type of the user's
catalog is told its expected cost before it runs, is stopped before its cost passes the budget
(Stopped, the reason naming the budget, describe()'s cost within it), and a warm pool is kept only as
long as what the budget leaves pays for."""

from __future__ import annotations

import time

import pytest

from shipyard.control.describe import OWN
from shipyard.errors import ValidationError
from shipyard.pytorch import PyTorch
from shipyard.store import Store
from shipyard.store.pools import PoolStore

pytestmark = pytest.mark.slow

# 36 USD/h is 0.01 USD a second.
CATALOG = """
ml.test.priced:
  vcpus: 1
  memory_gib: 1
  gpus: 0
  on_demand_usd_per_hour: 36
  spot_usd_per_hour: 10.8
"""


@pytest.fixture
def priced(home, tmp_path):
    home.mkdir(parents=True, exist_ok=True)
    (home / "instance_types.yaml").write_text(CATALOG)
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("import sys, time\nprint('training', flush=True)\n"
                                     "time.sleep(float(sys.argv[sys.argv.index('--seconds') + 1]))\n")
    return source


def _estimator(source, seconds: float, **kwargs) -> PyTorch:
    return PyTorch(entry_point="train.py", source_dir=str(source), instance_type="ml.test.priced",
                   hyperparameters={"seconds": seconds}, stop_grace_seconds=1, max_run=300, **kwargs)


def test_a_job_is_stopped_before_it_costs_more_than_max_cost(priced, capsys):
    est = _estimator(priced, 120, max_cost=0.05)   # $0.05 buys 5 s; stopping takes 2 s of it
    assert est.expected_cost().startswith("expected cost: $36.0000 per hour (1 x ml.test.priced, on demand); "
                                          "at most $3.00 in max_run (5 min); max_cost $0.05 buys 5 s, then the job is stopped")
    started = time.monotonic()
    with pytest.warns(UserWarning, match="was stopped"):
        est.fit(logs=True)
    assert time.monotonic() - started < 60   # not the script's 120 s
    assert "expected cost: $36.0000 per hour" in capsys.readouterr().out   # said before anything ran
    description = est.latest_training_job.describe()
    assert (description["TrainingJobStatus"], description["SecondaryStatus"]) == ("Stopped", "Stopped")
    assert description["SecondaryStatusTransitions"][-1]["StatusMessage"].startswith("Budget reached: max_cost $0.05")
    cost = description[OWN]["Cost"]["Amount"]
    assert 0.02 < cost <= 0.05, cost


def test_a_warm_pool_is_kept_only_as_long_as_the_budget_pays(priced):
    pytest.importorskip("shipyard.backends.sandbox").bwrap_problem() and pytest.skip("warm pools need a sandbox")
    est = _estimator(priced, 0, max_cost=0.25, keep_alive_period_in_seconds=3600)
    est.fit(logs=False)
    job = est.latest_training_job.name
    description = est.latest_training_job.describe()
    cost = description[OWN]["Cost"]["Amount"]
    store = Store()
    [kept] = [e["message"] for e in store.events(job, "info") if e["message"].startswith("warm pool")]
    affordable = int(kept.split(" kept for ")[1].split()[0])
    assert kept.endswith("not 3600: what max_cost $0.25 leaves pays for no more")
    assert affordable == pytest.approx((0.25 - cost) / 0.01, abs=2)   # retention billed at $0.01 a second
    pool = PoolStore(store).get(PoolStore(store).use(job)["pool"])
    assert pool.status == "Available" and pool.expires_at - time.time() <= affordable
    # What is left depends on how long the job ran (here about $0.20): the message says it and what it pays for.
    with pytest.raises(ValidationError, match=r"keep_alive_period_in_seconds=3600: max_cost \$0.25 leaves "
                                              r"\$0\.\d{4}: at most \d+ s of warm pool"):
        est.update(keep_alive_period_in_seconds=3600)
    est.update(keep_alive_period_in_seconds=0)   # released: nothing left running
    assert PoolStore(store).get(pool.name).status == "Terminated"
