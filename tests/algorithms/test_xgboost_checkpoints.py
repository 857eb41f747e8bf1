"""The built-in XGBoost algorithm's checkpoints, as SageMaker's container keeps them: with the job's checkpoint
directory (checkpointconfig.json's LocalPath) the leader writes `xgboost-checkpoint.<round>` after every round
and keeps the newest 5; started again, it continues from the newest one it can read and ends with num_round
rounds, the same model as a run never interrupted."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xgboost

from shipyard.algorithms.xgboost import checkpoints
from shipyard.algorithms.xgboost.train import MODEL_FILE, main
from shipyard.contract.layout import Layout


@pytest.fixture
def instance(tmp_path, monkeypatch):
    """One instance's /opt/ml as the agent lays it out for a job with checkpoint_s3_uri (the sync aside)."""
    layout = Layout(tmp_path / "ml")
    config = layout.input_config_dir
    config.mkdir(parents=True)
    (config / "inputdataconfig.json").write_text(json.dumps({"train": {"ContentType": "text/csv"}}))
    (config / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-1"]}))
    (config / "checkpointconfig.json").write_text(json.dumps({"LocalPath": "/opt/ml/checkpoints",
                                                              "S3Uri": "s3://bucket/checkpoints"}))
    rng = np.random.default_rng(0)
    features = rng.normal(size=(400, 3))
    labels = 2 * features[:, 0] - features[:, 2] + 0.1 * rng.normal(size=400)
    layout.channel_dir("train").mkdir(parents=True)
    np.savetxt(layout.channel_dir("train") / "train.csv", np.column_stack([labels, features]), delimiter=",")
    monkeypatch.setenv("SM_INPUT_DIR", str(layout.input_dir))
    return layout


def _train(layout: Layout, num_round: int) -> xgboost.Booster:
    (layout.input_config_dir / "hyperparameters.json").write_text(json.dumps({"num_round": str(num_round),
                                                                              "max_depth": "3"}))
    assert main() == 0
    booster = xgboost.Booster()
    booster.load_model(bytearray((layout.model_dir / MODEL_FILE).read_bytes()))
    return booster


def _rounds(folder) -> list[int]:
    return sorted(int(p.name.rsplit(".", 1)[1]) for p in folder.iterdir())


def test_a_restarted_instance_continues_from_the_newest_checkpoint(instance, capsys):
    folder = instance.base / "checkpoints"   # LocalPath /opt/ml/checkpoints, under this instance's own /opt/ml
    assert checkpoints.directory(instance) == folder
    whole = _train(instance, 12)
    assert _rounds(folder) == [7, 8, 9, 10, 11]   # every round written, the newest 5 kept
    uninterrupted = capsys.readouterr().out

    # Interrupted after round 8: what the new attempt restores holds rounds 0 to 8.
    for done in (9, 10, 11):
        (folder / f"xgboost-checkpoint.{done}").unlink()
    resumed = _train(instance, 12)
    out = capsys.readouterr().out
    assert "resuming from checkpoint xgboost-checkpoint.8 at round 9 of 12" in out
    assert "training 3 rounds" in out
    # The rounds are numbered as the model's, as in the uninterrupted run's log.
    assert "[9]#011train-rmse:" in out and "[8]#011" not in out and "[11]#011train-rmse:" in uninterrupted
    assert resumed.num_boosted_rounds() == 12
    assert _rounds(folder) == [7, 8, 9, 10, 11]
    data = xgboost.DMatrix(np.random.default_rng(1).normal(size=(50, 3)))
    np.testing.assert_allclose(resumed.predict(data), whole.predict(data), rtol=1e-5)

    # A checkpoint cut short is skipped for the one before it.
    (folder / "xgboost-checkpoint.11").write_bytes(b"\0\1")
    model, start, name = checkpoints.latest(folder)
    assert (start, name) == (11, "xgboost-checkpoint.10")
    assert _train(instance, 12).num_boosted_rounds() == 12


def test_a_checkpoint_of_more_rounds_than_num_round_is_an_error(instance, capsys):
    _train(instance, 6)
    (instance.input_config_dir / "hyperparameters.json").write_text(json.dumps({"num_round": "3"}))
    assert main() == 2
    failure = instance.failure_file.read_text()
    assert failure.startswith("ClientError: hyperparameters['num_round']=3:")
    assert "holds 6 rounds already" in failure


def test_without_a_checkpoint_directory_nothing_is_written(instance):
    instance.checkpointconfig_file.unlink()
    assert checkpoints.directory(instance) is None
    assert _train(instance, 3).num_boosted_rounds() == 3
    assert not list((instance.base / "checkpoints").glob("xgboost-checkpoint.*"))
