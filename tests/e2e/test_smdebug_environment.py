"""SageMaker's own libraries in a real 2-instance job (torch_distributed, gloo, one process per instance):
a script builds sagemaker_training's Environment and uses smdebug's hook from the job's hook config,
with scalars of its own; the test reads the debug output back with smdebug's create_trial."""
from __future__ import annotations

import json
import re
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest

from shipyard.debugger import CollectionConfig, DebuggerHookConfig
from shipyard.pytorch import PyTorch
from shipyard.runtime import served_libraries
from shipyard.store.db import Store

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).parent / "scripts" / "smdebug_environment_train.py"
HYPERPARAMETERS = {"steps": 4, "lr": 0.05, "hidden": 8, "optimizer": "sgd", "layers": [4, 8], "verbose": True}


def _channel(path: Path, seed: int) -> str:
    path.mkdir(parents=True)
    features = np.random.default_rng(seed).normal(size=(8, 4))
    np.savetxt(path / "data.csv", np.column_stack([features.sum(axis=1), features]), delimiter=",")
    return str(path)


def test_environment_and_smdebug_hook_across_two_instances(home, tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(SCRIPT, source / "train.py")
    hook_config = DebuggerHookConfig(hook_parameters={"save_interval": "2", "eval.save_interval": "1"},
                                     collection_configs=[CollectionConfig(name="weights"),
                                                         CollectionConfig(name="outputs")])
    est = PyTorch(entry_point="train.py", source_dir=str(source), instance_count=2,
                  distribution={"torch_distributed": {"enabled": True}},
                  hyperparameters=HYPERPARAMETERS, debugger_hook_config=hook_config, stop_grace_seconds=5)
    est.fit({"train": _channel(tmp_path / "train", 1), "test": _channel(tmp_path / "test", 2)},
            job_name="smdebug-environment", logs=False)

    artifacts = est.latest_training_job.describe()["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://")
    with tarfile.open(artifacts) as tar:
        seen = {m.name.removeprefix("./").removesuffix(".json"): json.loads(tar.extractfile(m).read())
                for m in tar.getmembers() if m.isfile()}
    assert sorted(seen) == ["algo-1", "algo-2"]
    for host, env in seen.items():
        assert env["current_host"] == host and env["hosts"] == ["algo-1", "algo-2"]
        assert env["hyperparameters"] == HYPERPARAMETERS  # JSON-decoded: int, float, str, list, bool
        assert [type(v) for v in env["hyperparameters"].values()] == [type(v) for v in HYPERPARAMETERS.values()]
        assert env["types"]["model_dir"] == "str" and env["types"]["num_gpus"] == "int"
        assert env["model_dir"] == env["module_model_dir"] and env["model_dir"].endswith("/model")
        assert sorted(env["channel_input_dirs"]) == ["test", "train"]
        assert all(path.endswith(f"/input/data/{name}") for name, path in env["channel_input_dirs"].items())
        assert env["channel_files"] == {"test": ["data.csv"], "train": ["data.csv"]}
        assert env["input_data_config"]["train"]["TrainingInputMode"] == "File"
        assert env["resource_config"]["current_host"] == host
        assert env["master_hostname"] == "algo-1" and env["is_master"] == (host == "algo-1")
        assert env["distribution_instance_groups"] == ["homogeneousCluster"]
        assert env["additional_framework_parameters"]["sagemaker_torch_distributed_enabled"] is True
        assert env["module_name"] == "train" and env["job_name"] == "smdebug-environment"
        assert env["num_gpus"] == 0 and env["num_cpus"] >= 1
        assert env["env_vars_differing"] == []  # to_env_vars() is what the job gave the process
        assert env["one_hook"] is True  # create_from_json_file and get_hook: the job's hook
    assert seen["algo-1"]["rank"] == 0 and seen["algo-2"]["rank"] == 1

    served_libraries.install()
    import smdebug.pytorch as smd
    from smdebug.trials import create_trial

    trial = create_trial(est.latest_job_debugger_artifacts_path())
    assert trial.workers() == ["worker_0"]  # include_workers=one: rank 1's hook saved nothing
    # 4 train steps then 2 eval forwards; the scalars are saved at every step, the modules at save steps
    assert trial.steps() == [0, 1, 2, 3, 4, 5]
    assert trial.steps(mode=smd.modes.TRAIN) == [0, 1, 2, 3] and trial.steps(mode=smd.modes.EVAL) == [0, 1]
    assert trial.modes() == [smd.modes.TRAIN, smd.modes.EVAL]
    assert (trial.mode(5), trial.mode_step(5)) == (smd.modes.EVAL, 1)
    train_loss = trial.tensor("scalar/train_loss").values(mode=smd.modes.TRAIN)
    assert sorted(train_loss) == [0, 1, 2, 3]
    np.testing.assert_allclose([train_loss[s][0] for s in range(4)], seen["algo-1"]["train_losses"], rtol=1e-6)
    eval_loss = trial.tensor("scalar/eval_loss").values(mode=smd.modes.EVAL)
    np.testing.assert_allclose([eval_loss[s][0] for s in (0, 1)], seen["algo-1"]["eval_losses"], rtol=1e-6)
    assert trial.tensor("Net_fc1.weight").steps(mode=smd.modes.TRAIN) == [0, 2]
    assert trial.tensor("Net_fc1.weight").steps(mode=smd.modes.EVAL) == [0, 1]
    assert trial.tensor("Net_fc1.weight").value(2).shape == (8, 4)
    assert trial.tensor("fc1_output_0").steps() == [0, 2, 4, 5]
    # One hook: the script's register_module on top of the job's hook saved nothing twice
    names = trial.tensor_names()
    assert not [n for n in names if re.search(r"_\d+_\d+$", n)], names
    logs = "".join(Store().log_path("smdebug-environment", h).read_text() for h in ("algo-1", "algo-2"))
    assert logs.count("shipyard: debugger hook saving tensors as") == 1
