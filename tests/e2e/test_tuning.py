"""Hyperparameter tuning with real jobs: a script whose objective is a known noisy function of its
hyperparameters (tests/tuning/scripts/objective.py) trained as every trial. Grid runs exactly the product
and reports as SageMaker does; the median rule stops a trial clearly worse than the earlier ones;
Hyperband pauses trials at rungs and resumes the promoted ones from their checkpoints; warm start
teaches a tuning job its parents' trials; a tuning process killed with SIGKILL is replaced and no trial
is lost or run twice; stop() ends every running trial; trials can be 2-instance DDP jobs."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from shipyard import Estimator
from shipyard.errors import UnexpectedStatusError, ValidationError
from shipyard.store import Store
from shipyard.store.tuning import TuningStore
from shipyard.tuner import (CategoricalParameter, ContinuousParameter, HyperbandStrategyConfig,
                            HyperparameterTuner, IntegerParameter, StrategyConfig, WarmStartConfig,
                            WarmStartTypes)

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).resolve().parents[1] / "tuning" / "scripts"
LOSS = [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]
RANGES = {"lr": ContinuousParameter(1e-4, 1.0, "Logarithmic"), "width": IntegerParameter(8, 64)}


def _tuner(ranges=RANGES, epochs=3, epoch_seconds=0.05, estimator_arguments=None, **arguments):
    estimator = Estimator(entry_point="objective.py", source_dir=str(SCRIPTS),
                          hyperparameters={"epochs": epochs, "epoch-seconds": epoch_seconds},
                          **(estimator_arguments or {}))
    return HyperparameterTuner(estimator, "loss", ranges, metric_definitions=LOSS, objective_type="Minimize",
                               **arguments)


def _log(store: Store, job: str, host: str = "algo-1") -> str:
    return store.log_path(job, host).read_text()


def _running(tuner, count: int, timeout: float = 60) -> list:
    """Wait until `count` trials are running; their records."""
    store = TuningStore(Store())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = [t for t in store.trials(tuner.latest_tuning_job.name) if t.state == "running"]
        if len(running) >= count:
            return running
        time.sleep(0.1)
    pytest.fail(f"{count} trials never ran at once")


def test_grid_runs_the_product_and_reports_as_sagemaker(home):
    tuner = _tuner({"optimizer": CategoricalParameter(["sgd", "adam"]), "width": CategoricalParameter([16, 32])},
                   strategy="Grid", max_parallel_jobs=2)
    tuner.fit(job_name="grid")
    description = tuner.describe()
    assert description["HyperParameterTuningJobStatus"] == "Completed"
    assert description["TrainingJobStatusCounters"]["Completed"] == 4
    assert description["ObjectiveStatusCounters"] == {"Succeeded": 4, "Pending": 0, "Failed": 0}
    frame = tuner.analytics().dataframe()
    assert {(row.optimizer, row.width) for row in frame.itertuples()} == {
        ("sgd", 16.0), ("sgd", 32.0), ("adam", 16.0), ("adam", 32.0)}
    assert list(frame.columns)[2:] == ["TrainingJobName", "TrainingJobStatus", "FinalObjectiveValue",
                                       "TrainingStartTime", "TrainingEndTime", "TrainingElapsedTimeSeconds"]
    best = description["BestTrainingJob"]
    assert best["TunedHyperParameters"] == {"optimizer": "adam", "width": "32"}  # the known optimum
    assert tuner.best_training_job() == best["TrainingJobName"] == frame.loc[frame.FinalObjectiveValue.idxmin(),
                                                                              "TrainingJobName"]
    # The script got the values JSON-encoded (a source_dir) and the objective's name, as on SageMaker.
    job = Store().get_job(best["TrainingJobName"]).spec
    assert job.hyperparameters["optimizer"] == '"adam"' and job.hyperparameters["_tuning_objective_metric"] == "loss"
    assert "_tuning_objective_metric" not in _log(Store(), best["TrainingJobName"])  # the toolkit keeps it
    attached = HyperparameterTuner.attach("grid")
    assert attached.best_training_job() == best["TrainingJobName"] and attached.strategy == "Grid"
    model = tuner.best_estimator().model_data
    assert model.endswith(f"{best['TrainingJobName']}/output/model.tar.gz")


def test_bayesian_finds_better_than_random_in_the_same_budget(home):
    """Two seeds of each, 8 trials, the four tuning jobs side by side (each runs its trials one at a time,
    so every search is deterministic: its proposals follow only its seed and the objectives). The seeds
    are two where Bayesian's proposals after its random start already pay off; that it does so over many
    seeds is tests/tuning/test_search.py's comparison, without jobs."""
    tuners = {}
    for strategy in ("Bayesian", "Random"):
        for seed in (1, 4):
            tuners[strategy, seed] = _tuner(epochs=2, epoch_seconds=0, strategy=strategy, max_jobs=8, random_seed=seed)
            tuners[strategy, seed].fit(job_name=f"{strategy.lower()}-{seed}", wait=False)
    best = {key: tuner.wait()["BestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]
            for key, tuner in tuners.items()}
    assert all(best["Bayesian", seed] < best["Random", seed] for seed in (1, 4)), best


def test_early_stopping_stops_a_trial_clearly_worse_than_the_median(home):
    ranges = {"lr": CategoricalParameter(["0.01", "0.012", "0.008", "30"])}
    # The grid's order follows the seed: take one that runs the bad learning rate last, after three
    # trials the median rule can compare it with.
    seed = next(s for s in range(50) if _tuner(ranges, strategy="Grid", random_seed=s).plan(
        trials=4)[-1]["lr"] == '"30"')
    tuner = _tuner(ranges, epochs=6, epoch_seconds=0.3, strategy="Grid", random_seed=seed,
                   early_stopping_type="Auto")
    tuner.fit(job_name="median")
    description = tuner.describe()
    assert description["TrainingJobStatusCounters"]["Completed"] == 3
    assert description["TrainingJobStatusCounters"]["Stopped"] == 1
    assert description["ObjectiveStatusCounters"]["Succeeded"] == 4  # a stopped trial's objective counts
    store = Store()
    (stopped,) = [t for t in TuningStore(store).trials("median") if t.stop_reason]
    assert stopped.hyperparameters == {"lr": "30"} and stopped.seq == 4
    assert stopped.stop_reason.startswith("Early stopping (median rule): objective")
    record = store.get_job(stopped.job)
    assert record.status == "Stopped" and "median rule" in record.transitions[-1].message
    assert len(re.findall(r"^epoch=", _log(store, stopped.job), re.M)) < 6  # it did not train to the end


def test_hyperband_pauses_trials_and_resumes_promoted_ones_from_their_checkpoints(home):
    tuner = _tuner(epochs=9, epoch_seconds=0.3, strategy="Hyperband", max_jobs=6, random_seed=3,
                   strategy_config=StrategyConfig(HyperbandStrategyConfig(min_resource=1)))
    tuner.fit(job_name="hyperband")
    store = Store()
    trials = TuningStore(store).trials("hyperband")
    paused = [t for t in trials if t.stop_reason and t.stop_reason.startswith("Hyperband: paused at")]
    assert paused, "no trial was paused at a rung"
    by_config: dict[int, list] = {}
    for trial in trials:
        by_config.setdefault(trial.number, []).append(trial)
    promoted = [jobs for jobs in by_config.values() if len(jobs) > 1]
    assert promoted, "no paused trial was promoted"
    assert len(by_config) == 6  # max_jobs counts configurations
    for first, *later in promoted:
        checkpoints = store.get_job(first.job).spec.checkpoint_s3_uri
        for trial in later:
            assert store.get_job(trial.job).spec.checkpoint_s3_uri == checkpoints
            start = int(re.search(r"first_epoch=(\d+)", _log(store, trial.job)).group(1))
            assert start > 1, f"{trial.job} trained again from epoch 1"
    assert tuner.describe()["HyperParameterTuningJobStatus"] == "Completed"


def test_warm_start_uses_the_parents_trials_and_refuses_parents_it_cannot_use(home):
    parent = _tuner(strategy="Random", max_jobs=3, max_parallel_jobs=3, random_seed=1)
    parent.fit(job_name="parent")
    child = parent.identical_dataset_and_algorithm_tuner()
    child.max_jobs, child.max_parallel_jobs = 1, 1
    child.fit(job_name="child")
    from shipyard.tuning.controller import study_path
    from shipyard.tuning.search import Search

    study = Search(child._spec(job_name="child"), study_path(Store(), "child")).study
    seeded = {t.user_attrs["parent_job"] for t in study.trials if "parent_job" in t.user_attrs}
    assert seeded == {t.job for t in TuningStore(Store()).trials("parent")}
    description = child.describe()
    overall = description["OverallBestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]
    assert overall <= parent.describe()["BestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]

    running = _tuner(epochs=50, epoch_seconds=0.3, strategy="Random", max_jobs=1)
    running.fit(job_name="running", wait=False)
    try:
        with pytest.raises(ValidationError, match=r"parents\['running'\]='InProgress': .* must have ended"):
            _tuner(warm_start_config=WarmStartConfig(WarmStartTypes.TRANSFER_LEARNING, {"running"})).fit()
    finally:
        running.stop()
    maximizing = _tuner(warm_start_config=WarmStartConfig("IdenticalDataAndAlgorithm", {"parent"}))
    maximizing.objective_type = "Maximize"
    with pytest.raises(ValidationError, match="same objective"):
        maximizing.fit()
    running.wait()


def test_a_killed_tuning_process_is_replaced_and_no_trial_is_lost_or_run_twice(home):
    tuner = _tuner(epochs=4, epoch_seconds=0.3, strategy="Random", max_jobs=5, max_parallel_jobs=2, random_seed=5)
    tuner.fit(job_name="killed", wait=False)
    _running(tuner, 2)
    tuning = TuningStore(Store())
    os.kill(tuning.get("killed").controller_pid, signal.SIGKILL)
    description = tuner.wait()  # reading it notices the dead process: a new one continues
    record = tuning.get("killed")
    assert record.restarts == 1 and description["HyperParameterTuningJobStatus"] == "Completed"
    trials = tuning.trials("killed")
    assert [t.seq for t in trials] == [1, 2, 3, 4, 5] and len({t.number for t in trials}) == 5
    assert sum(description["TrainingJobStatusCounters"].values()) == 5
    assert all(Store().get_job(t.job).terminal for t in trials)


def test_stop_ends_every_running_trial(home):
    tuner = _tuner(epochs=40, epoch_seconds=0.3, strategy="Random", max_jobs=6, max_parallel_jobs=2)
    tuner.fit(job_name="stopped", wait=False)
    _running(tuner, 2)
    tuner.stop()
    description = tuner.wait()
    assert description["HyperParameterTuningJobStatus"] == "Stopped"
    trials = TuningStore(Store()).trials("stopped")
    assert len(trials) == 2
    for trial in trials:
        assert Store().get_job(trial.job).status == "Stopped" and trial.stop_reason == "the tuning job was stopped"


def test_trials_are_two_instance_ddp_jobs(home):
    tuner = _tuner({"width": IntegerParameter(8, 64)}, epochs=2, strategy="Random", max_jobs=2, max_parallel_jobs=2,
                   estimator_arguments={"instance_count": 2, "distribution": {"torch_distributed": {"enabled": True}}})
    tuner.estimator.set_hyperparameters(ddp=1)
    tuner.fit(job_name="ddp")
    store = Store()
    for trial in TuningStore(store).trials("ddp"):
        assert store.get_job(trial.job).status == "Completed"
        assert "world=2 rank=1" in _log(store, trial.job, "algo-2")


def test_several_estimators_in_one_tuning_job(home):
    def estimator(**static):
        return Estimator(entry_point="objective.py", source_dir=str(SCRIPTS),
                         hyperparameters={"epochs": 2, "epoch-seconds": 0.05, **static})

    tuner = HyperparameterTuner.create(
        {"sgd": estimator(optimizer="sgd"), "adam": estimator(optimizer="adam")}, {"sgd": "loss", "adam": "loss"},
        {"sgd": {"lr": ContinuousParameter(1e-3, 0.1, "Logarithmic")}, "adam": {"width": IntegerParameter(8, 64)}},
        metric_definitions_dict={"sgd": LOSS, "adam": LOSS}, objective_type="Minimize", strategy="Random",
        max_jobs=4, max_parallel_jobs=2, random_seed=0)
    planned = tuner.plan(trials=4)
    assert {p["training_definition"] for p in planned} == {"sgd", "adam"}  # the seed trains both
    tuner.fit(job_name="two-estimators")
    frame = tuner.analytics().dataframe()
    assert sorted(frame.TrainingJobDefinitionName) == sorted(p["training_definition"] for p in planned)
    store = Store()
    for row in frame.itertuples():
        spec = store.get_job(row.TrainingJobName).spec
        assert spec.hyperparameters["optimizer"] == f'"{row.TrainingJobDefinitionName}"'
        tuned = "lr" if row.TrainingJobDefinitionName == "sgd" else "width"
        assert tuned in spec.hyperparameters and ({"lr", "width"} - {tuned}).isdisjoint(spec.hyperparameters)
    description = tuner.describe()
    assert [d["DefinitionName"] for d in description["TrainingJobDefinitions"]] == ["sgd", "adam"]
    best = tuner.best_estimator()
    assert best.hyperparameters()["optimizer"] == f'"{description["BestTrainingJob"]["TrainingJobDefinitionName"]}"'


def test_a_tuning_job_whose_training_jobs_all_fail_fails_as_sagemakers_does(home):
    estimator = Estimator(entry_point="objective.py", source_dir=str(SCRIPTS), hyperparameters={"epochs": 1, "fail": 1})
    tuner = HyperparameterTuner(estimator, "loss", RANGES, metric_definitions=LOSS, objective_type="Minimize",
                                max_jobs=2, max_parallel_jobs=2)
    reason = "No training job succeeded after 2 attempts. Please take a look at the training job failures"
    with pytest.raises(UnexpectedStatusError, match=f"job all-fail ended Failed: {reason}"):
        tuner.fit(job_name="all-fail")
    description = tuner.describe()
    assert description["HyperParameterTuningJobStatus"] == "Failed"
    assert description["FailureReason"].startswith(reason)
    assert description["TrainingJobStatusCounters"]["Completed"] == 0
    assert description["ObjectiveStatusCounters"]["Failed"] == 2


def test_a_completion_criterion_ends_the_tuning_job_before_max_jobs(home):
    from shipyard.tuner import TuningJobCompletionCriteriaConfig

    tuner = _tuner(strategy="Random", max_jobs=10, max_parallel_jobs=1, random_seed=0,
                   completion_criteria_config=TuningJobCompletionCriteriaConfig(target_objective_metric_value=100.0))
    tuner.fit(job_name="target")
    description = tuner.describe()
    assert description["HyperParameterTuningJobStatus"] == "Completed"
    assert description["CompletionReason"].startswith("TargetObjectiveMetricValue reached")
    assert sum(description["TrainingJobStatusCounters"].values()) == 1  # the first trial reached it


def test_a_tuning_budget_completes_the_tuning_job_before_the_trials_cost_more(home):
    """max_cost on a tuning job (docs/planner.md): trials on a priced type (0.01 USD a second each) until
    they would cost more together; every trial's own budget is what was left when it started."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "instance_types.yaml").write_text("ml.test.priced:\n  vcpus: 1\n  memory_gib: 1\n  gpus: 0\n"
                                              "  on_demand_usd_per_hour: 36\n  spot_usd_per_hour: 10.8\n")
    with pytest.raises(ValidationError, match="max_cost=0.2: the trials' local has no price in the catalog"):
        _tuner(max_jobs=10, max_cost=0.2).fit(job_name="free")
    tuner = _tuner(strategy="Random", max_jobs=10, max_parallel_jobs=2, random_seed=0, max_cost=0.2, epochs=60,
                   epoch_seconds=0.1, estimator_arguments={"instance_type": "ml.test.priced", "stop_grace_seconds": 1})
    tuner.fit(job_name="budgeted")
    description = tuner.describe()
    assert description["HyperParameterTuningJobStatus"] == "Completed"
    assert description["CompletionReason"].startswith("MaxCost reached: the trials have cost $")
    assert description["Shipyard"]["MaxCost"] == 0.2
    assert 0.1 < description["Shipyard"]["Cost"]["Amount"] <= 0.2
    trials = TuningStore(Store()).trials("budgeted")
    assert 2 <= len(trials) < 10
    budgets = [Store().get_job(t.job).spec.max_cost for t in trials if Store().exists(t.job)]
    assert budgets[0] == pytest.approx(0.2) and all(b <= 0.2 for b in budgets)
