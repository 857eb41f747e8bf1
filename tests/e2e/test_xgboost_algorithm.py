"""SageMaker's built-in XGBoost algorithm, the way its users start it: `image_uris.retrieve("xgboost", ...)` and
a generic Estimator with only hyperparameters (no entry point), channels with content types. One job of two
instances trains over XGBoost's own collective (the tracker on algo-1) with a ShardedByS3Key CSV train channel
and a libsvm validation channel, judged by the XGBoost rules, and CreateXgboostReport writes its training
report; one tuning job (a single trial) trains on Parquet with a CSV validation channel
and is tuned on `validation:auc` with no metric_definitions given, as the algorithm defines its metrics. One spot
job, interrupted while it trains, continues in its new attempt from the newest of the checkpoints the algorithm
wrote every round."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xgboost

from shipyard import Estimator, TrainingInput, image_uris
from shipyard.debugger import Rule, rule_configs, trial
from shipyard.store import Store
from shipyard.tuner import HyperparameterTuner, IntegerParameter

pytestmark = pytest.mark.slow

REGION = "us-west-2"


def _regression(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    features = rng.uniform(-1, 1, size=(rows, 4))
    return features, 3 * features[:, 0] - 2 * features[:, 1] + 0.05 * rng.normal(size=rows)


def _csv(path: Path, features: np.ndarray, labels: np.ndarray) -> None:
    """SageMaker's CSV for the algorithm: label first, no header."""
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savetxt(path, np.column_stack([labels, features]), delimiter=",", fmt="%.6f")


def _libsvm(path: Path, features: np.ndarray, labels: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{y:.6f} " + " ".join(f"{i}:{v:.6f}" for i, v in enumerate(row)) + "\n"
                            for row, y in zip(features, labels, strict=True)))


def _model(description: dict) -> xgboost.Booster:
    archive = description["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://")
    with tarfile.open(archive) as tar:
        assert "xgboost-model" in tar.getnames()
        booster = xgboost.Booster()
        booster.load_model(bytearray(tar.extractfile("xgboost-model").read()))
    return booster


def test_distributed_xgboost_over_sharded_csv_with_libsvm_validation(home, tmp_path):
    data = tmp_path / "data"
    features, labels = _regression(3000, seed=1)
    # Two objects: ShardedByS3Key gives each instance one.
    _csv(data / "train" / "part-0.csv", features[:1200], labels[:1200])
    _csv(data / "train" / "part-1.csv", features[1200:2400], labels[1200:2400])
    _libsvm(data / "validation" / "validation.libsvm", features[2400:], labels[2400:])

    image = image_uris.retrieve("xgboost", REGION, "1.7-1")
    est = Estimator(image_uri=image, role="arn:aws:iam::111122223333:role/SageMakerRole", instance_count=2,
                    instance_type="local", stop_grace_seconds=5,
                    hyperparameters={"num_round": 20, "objective": "reg:squarederror", "max_depth": 4, "eta": 0.3,
                                     "eval_metric": "rmse,mae", "subsample": 0.9},
                    # The XGBoost rules: two of the four features decide the label; trees no deeper than max_depth.
                    rules=[Rule.sagemaker(rule_configs.feature_importance_overweight(),
                                          rule_parameters={"nfeatures": "2", "threshold": "0.5"}),
                           Rule.sagemaker(rule_configs.tree_depth(), rule_parameters={"depth": "4"}),
                           Rule.sagemaker(rule_configs.create_xgboost_report())])
    est.fit({"train": TrainingInput(f"file://{data / 'train'}", content_type="text/csv",
                                    distribution="ShardedByS3Key"),
             "validation": TrainingInput(f"file://{data / 'validation'}", content_type="text/libsvm")},
            logs=False)
    job = est.latest_training_job
    description = job.describe()
    assert description["TrainingJobStatus"] == "Completed", description.get("FailureReason")
    assert description["AlgorithmSpecification"]["TrainingImage"] == image
    assert description["HyperParameters"] == {"num_round": "20", "objective": "reg:squarederror", "max_depth": "4",
                                              "eta": "0.3", "eval_metric": "rmse,mae", "subsample": "0.9"}
    statuses = {s["RuleConfigurationName"]: s for s in description["DebugRuleEvaluationStatuses"]}
    assert statuses["FeatureImportanceOverweight"]["RuleEvaluationStatus"] == "IssuesFound", statuses
    details = statuses["FeatureImportanceOverweight"]["StatusDetails"]
    assert "the 2 most important features (f1, f0)" in details or "the 2 most important features (f0, f1)" in details
    assert statuses["TreeDepth"]["RuleEvaluationStatus"] == "NoIssuesFound", statuses
    # The training report, where SageMaker leaves it: the rule's folder under the rules' output.
    assert statuses["CreateXgboostReport"]["RuleEvaluationStatus"] == "NoIssuesFound", statuses
    output = next(r["S3OutputPath"] for r in description["DebugRuleConfigurations"]
                  if r["RuleConfigurationName"] == "CreateXgboostReport")
    report = Path(output.removeprefix("file://"), "CreateXgboostReport", "xgboost_report.html").read_text()
    assert "<td>problem</td><td>regression</td>" in report and "<td>max_depth</td><td>4</td>" in report
    for metric in ("rmse", "mae"):
        assert f"<td>{metric}</td><td>train</td>" in report and f"<td>{metric}</td><td>validation</td>" in report
    assert re.findall(r"<tr><td>(f\d)</td>", report)[:2] == ["f0", "f1"]   # the label is 3 f0 - 2 f1
    assert "Regression, at round 15" in report
    tensors = trial(job.name)   # the leader saved the rules' collections every 5 rounds
    assert tensors.steps() == [0, 5, 10, 15] and tensors.workers() == ["worker_0"]
    assert "trees/Node" in tensors.tensor_names(step=15, collection="trees")

    logs = {host: (home / "jobs" / job.name / "logs" / f"{host}.log").read_text() for host in ("algo-1", "algo-2")}
    # Each instance held its own shard, and both joined algo-1's tracker as one world of two.
    for host, rank in (("algo-1", 0), ("algo-2", 1)):
        assert "channel train: 1200 rows (csv, ShardedByS3Key)" in logs[host]
        assert "channel validation: 600 rows (libsvm, FullyReplicated)" in logs[host]
        assert f"worker {host}: rank {rank} of world size 2" in logs[host]
    assert "tracker on algo-1 at" in logs["algo-1"] and "tracker on" not in logs["algo-2"]
    # The leader prints each round in SageMaker's form; the metrics are scraped under SageMaker's names.
    assert "[19]#011train-rmse:" in logs["algo-1"] and "#011validation-mae:" in logs["algo-1"]
    final = {m["MetricName"]: m["Value"] for m in description["FinalMetricDataList"]}
    assert set(final) == {"train:rmse", "train:mae", "validation:rmse", "validation:mae"}
    assert final["validation:rmse"] < 0.5 * labels.std()

    booster = _model(description)
    assert booster.num_boosted_rounds() == 20
    # Trained on both shards: it predicts rows neither instance saw, close to the reported validation error.
    held_out, truth = _regression(500, seed=7)
    rmse = float(np.sqrt(np.mean((booster.predict(xgboost.DMatrix(held_out)) - truth) ** 2)))
    assert rmse < 0.5 * truth.std()
    assert abs(rmse - final["validation:rmse"]) < 0.2


def test_tuning_the_algorithm_on_validation_auc_with_parquet_and_csv(home, tmp_path):
    rng = np.random.default_rng(3)
    features = rng.normal(size=(1500, 5))
    labels = (features[:, 0] + 0.5 * features[:, 2] + 0.3 * rng.normal(size=1500) > 0).astype(float)
    data = tmp_path / "data"
    (data / "train").mkdir(parents=True)
    # Parquet for the algorithm: the label is the first column.
    frame = pd.DataFrame(np.column_stack([labels[:1200], features[:1200]]), columns=["y", *"abcde"])
    frame.to_parquet(data / "train" / "train.parquet")
    _csv(data / "validation" / "validation.csv", features[1200:], labels[1200:])

    est = Estimator(image_uri=image_uris.retrieve("xgboost", REGION, "1.7-1"), role="SageMakerRole",
                    instance_count=1, instance_type="local", stop_grace_seconds=5,
                    hyperparameters={"num_round": 10, "objective": "binary:logistic", "eta": 0.3})
    # No metric_definitions: the algorithm defines validation:auc, as SageMaker's does.
    tuner = HyperparameterTuner(est, "validation:auc", {"max_depth": IntegerParameter(2, 4)}, strategy="Random",
                                max_jobs=1, max_parallel_jobs=1, random_seed=1)
    tuner.fit({"train": TrainingInput(f"file://{data / 'train'}", content_type="application/x-parquet"),
               "validation": TrainingInput(f"file://{data / 'validation'}", content_type="text/csv")},
              job_name="xgb-auc")
    description = tuner.describe()
    assert description["HyperParameterTuningJobStatus"] == "Completed", description.get("FailureReason")
    best = description["BestTrainingJob"]
    trial = Estimator.attach(best["TrainingJobName"]).latest_training_job.describe()
    # The trial got the objective as SageMaker's tuning gives it, and the algorithm evaluated it.
    assert trial["HyperParameters"]["_tuning_objective_metric"] == "validation:auc"
    assert trial["HyperParameters"]["max_depth"] in {"2", "3", "4"}
    final = {m["MetricName"]: m["Value"] for m in trial["FinalMetricDataList"]}
    assert best["FinalHyperParameterTuningJobObjectiveMetric"] == {"MetricName": "validation:auc", "Type": "Maximize",
                                                                  "Value": final["validation:auc"]}
    assert final["validation:auc"] > 0.85
    log = Store().log_path(best["TrainingJobName"], "algo-1").read_text()
    assert "channel train: 1200 rows (parquet, FullyReplicated)" in log
    assert "channel validation: 300 rows (csv, FullyReplicated)" in log
    assert "tracker" not in log and "[9]#011train-auc:" in log   # one instance: no collective

    booster = _model(trial)
    predicted = booster.predict(xgboost.DMatrix(features[1200:]))
    assert ((predicted > 0.5) == (labels[1200:] > 0.5)).mean() > 0.8


def test_a_spot_interruption_continues_from_the_algorithms_checkpoint(home, tmp_path, wait_for_line):
    rounds = 600   # long enough that the interruption lands while they train, whatever the machine's load: it
    # landed 55-140 rounds (0.2-0.5 s) after the request on an idle machine, and after all 150 of an earlier count
    # under the suite on a fast machine
    features, labels = _regression(30000, seed=2)
    _csv(tmp_path / "data" / "train.csv", features, labels)
    checkpoints = tmp_path / "checkpoints"
    est = Estimator(image_uri=image_uris.retrieve("xgboost", REGION, "1.7-1"), role="SageMakerRole", instance_count=1,
                    instance_type="local", stop_grace_seconds=5, use_spot_instances=True, max_run=300, max_wait=600,
                    checkpoint_s3_uri=f"file://{checkpoints}", interruption_notice_seconds=5,
                    hyperparameters={"num_round": rounds, "max_depth": 3, "eta": 0.05})
    est.fit({"train": TrainingInput(f"file://{tmp_path / 'data'}", content_type="text/csv")}, wait=False)
    job = est.latest_training_job
    store = Store()
    log = store.log_path(job.name, "algo-1")
    wait_for_line(log, "[5]#011train-rmse:")
    assert store.request_interrupt(job.name)   # as `shipyard spot interrupt JOB` asks
    description = job.wait(logs=False)
    assert description["TrainingJobStatus"] == "Completed", description.get("FailureReason")
    assert [a["Outcome"] for a in description["Shipyard"]["Attempts"]] == ["Interrupted", "Completed"]

    text = log.read_text()
    resumed = re.findall(rf"resuming from checkpoint xgboost-checkpoint\.(\d+) at round (\d+) of {rounds}", text)
    assert len(resumed) == 1, text[-3000:]
    checkpointed, start = map(int, resumed[0])
    # The new attempt started where the first one was cut short, not at round 0, and trained the rest.
    assert 5 < start == checkpointed + 1 < rounds
    assert text.count("[0]#011train-rmse:") == 1 and text.count(f"[{rounds - 1}]#011train-rmse:") == 1
    assert f"training {rounds - start} rounds" in text
    assert _model(description).num_boosted_rounds() == rounds
    # The newest 5 checkpoints: the older ones were deleted locally, and so at the URI.
    assert sorted(p.name for p in checkpoints.iterdir()) == [f"xgboost-checkpoint.{n}"
                                                             for n in range(rounds - 5, rounds)]
    assert not [w for w in description["Shipyard"].get("Warnings", []) if "started again from step 0" in w]
