"""Debugger jobs end to end through the SDK: tensors saved without script changes, read back with
trial(), rules judged beside the job."""
from __future__ import annotations

from pathlib import Path

import pytest

from shipyard.debugger import DebuggerHookConfig, Rule, rule_configs, trial
from shipyard.pytorch import PyTorch
from shipyard.store.db import Store

pytestmark = pytest.mark.slow
SCRIPTS = Path(__file__).parent / "scripts"


def _fit(tmp_path, name, hyperparameters, **kwargs):
    est = PyTorch(entry_point=str(SCRIPTS / "debug_net.py"), instance_count=1, framework_version="2.3",
                  py_version="py311", output_path=str(tmp_path / "out"), hyperparameters=hyperparameters,
                  **kwargs)
    est.fit(job_name=name, wait=True, logs=False)
    return Store().get_job(name)


def _statuses(job):
    from shipyard.control.describe import describe

    return {s["RuleConfigurationName"]: s for s in describe(Store(), job.name).get("DebugRuleEvaluationStatuses", [])}


def test_vanishing_gradient_in_a_deep_sigmoid_net(home, tmp_path):
    rule = Rule.sagemaker(rule_configs.vanishing_gradient(), rule_parameters={"threshold": "1e-4"})
    hook = DebuggerHookConfig(hook_parameters={"save_interval": "5"})
    job = _fit(tmp_path, "vg-sigmoid", {"kind": "sigmoid", "steps": 12}, rules=[rule], debugger_hook_config=hook)
    status = _statuses(job)["VanishingGradient"]
    assert status["RuleEvaluationStatus"] == "IssuesFound", status
    assert "at step 0 resulted in the condition being met" in status["StatusDetails"]
    t = trial(job.name)
    assert t.steps() == [0, 5, 10]
    assert any(n.startswith("gradient/") for n in t.tensor_names(collection="gradients"))


def test_healthy_net_gives_no_issues_and_nothing_asked_saves_nothing(home, tmp_path):
    rule = Rule.sagemaker(rule_configs.vanishing_gradient())
    job = _fit(tmp_path, "vg-relu", {"kind": "relu", "steps": 12}, rules=[rule],
               debugger_hook_config=DebuggerHookConfig(hook_parameters={"save_interval": "5"}))
    assert _statuses(job)["VanishingGradient"]["RuleEvaluationStatus"] == "NoIssuesFound"
    plain = _fit(tmp_path, "plain", {"kind": "relu", "steps": 3})
    assert plain.spec.debugger_hook_config is None
    assert not (tmp_path / "out" / "plain" / "debug-output").exists()


@pytest.mark.sandbox
def test_tensorboard_output_is_synced_to_its_s3_path(home, tmp_path, s3):
    """Issue 22: TensorBoardOutputConfig, as SageMaker's documentation writes it; what the script writes in
    /opt/ml/output/tensorboard (on both instances) reaches <s3_output_path>/<job>/tensorboard-output/."""
    from shipyard.debugger import TensorBoardOutputConfig

    s3.bucket("tboard")
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(
        "import os, time\n"
        "d = '/opt/ml/output/tensorboard'\n"
        "for step in range(3):\n"
        "    with open(os.path.join(d, f'events.out.tfevents.{step}.' + os.environ['SM_CURRENT_HOST']), 'wb') as f:\n"
        "        f.write(b'step %d' % step)\n"
        "    time.sleep(0.3)\n")
    tensorboard_output_config = TensorBoardOutputConfig(
        s3_output_path="s3://tboard/logs", container_local_output_path="/opt/ml/output/tensorboard")
    estimator = PyTorch(entry_point="train.py", source_dir=str(source), instance_count=2, instance_type="local",
                        tensorboard_output_config=tensorboard_output_config, max_run=120, stop_grace_seconds=5)
    estimator.fit(logs=False)
    job = estimator.latest_training_job
    path = estimator.latest_job_tensorboard_artifacts_path()
    assert path == f"s3://tboard/logs/{job.name}/tensorboard-output"
    listed = s3.client.list_objects_v2(Bucket="tboard", Prefix=f"logs/{job.name}/tensorboard-output/")
    keys = sorted(item["Key"].rsplit("/", 1)[1] for item in listed.get("Contents", []))
    assert keys == sorted(f"events.out.tfevents.{step}.{host}" for step in range(3) for host in ("algo-1", "algo-2"))
    body = s3.client.get_object(Bucket="tboard", Key=f"logs/{job.name}/tensorboard-output/events.out.tfevents.2.algo-1")
    assert body["Body"].read() == b"step 2"
    assert job.describe()["TensorBoardOutputConfig"] == {"S3OutputPath": "s3://tboard/logs",
                                                          "LocalPath": "/opt/ml/output/tensorboard"}
