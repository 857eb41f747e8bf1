"""The built-in XGBoost algorithm's content types: text/csv (label first, no header, csv_weights), libsvm (the
default), parquet; what is not data; and the algorithm run in this process on one instance's /opt/ml, to a model
XGBoost loads, or to a ClientError in output/failure."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import xgboost

from shipyard import Estimator, TrainingInput, image_uris
from shipyard.algorithms.xgboost import data
from shipyard.algorithms.xgboost.train import main
from shipyard.contract.layout import Layout
from shipyard.errors import ValidationError


@pytest.mark.parametrize(("given", "kind"), [
    (None, "libsvm"), ("libsvm", "libsvm"), ("text/libsvm", "libsvm"), ("text/x-libsvm", "libsvm"),
    ("csv", "csv"), ("text/csv", "csv"), ("TEXT/CSV", "csv"), ("text/csv; label_size=1", "csv"),
    ("parquet", "parquet"), ("application/x-parquet", "parquet"),
])
def test_content_types_as_sagemaker_accepts_them(given, kind):
    assert data.content_type(given) == kind


@pytest.mark.parametrize(("given", "says"), [
    ("text/csv; label_size=2", "label_size must be 1"),
    ("application/x-recordio-protobuf", "RecordIO-protobuf is not supported"),
    ("application/json", "use one of 'text/csv'"),
])
def test_other_content_types_are_errors(given, says):
    with pytest.raises(ValidationError, match=says) as error:
        data.content_type(given, "validation")
    assert error.value.field == "channel validation: content_type"


def test_csv_label_first_no_header_and_weights(tmp_path):
    (tmp_path / "a.csv").write_text("1,0.5,7,2\n0,1.5,8,3\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.csv").write_text("1,2.5,9,4\n")
    (tmp_path / ".hidden.csv").write_text("junk\n")      # names starting with . or _ are not data
    (tmp_path / "_SUCCESS").write_text("")
    plain = data.load(tmp_path, "csv", "train")
    assert plain.features.tolist() == [[0.5, 7, 2], [1.5, 8, 3], [2.5, 9, 4]] and plain.labels.tolist() == [1, 0, 1]
    assert plain.weights is None
    weighted = data.load(tmp_path, "csv", "train", csv_weights=True)
    assert weighted.weights.tolist() == [0.5, 1.5, 2.5] and weighted.features.tolist() == [[7, 2], [8, 3], [9, 4]]


def test_a_csv_header_is_an_error_naming_the_file(tmp_path):
    (tmp_path / "train.csv").write_text("label,x\n1,2\n")
    with pytest.raises(ValidationError, match="no header line") as error:
        data.load(tmp_path, "csv", "train")
    assert error.value.value == str(tmp_path / "train.csv")


def test_libsvm_rows_weights_and_widths(tmp_path):
    (tmp_path / "part").write_text("1 0:1.5 3:2\n0:2.0 1:4 # a comment\n\n")
    loaded = data.load(tmp_path, "libsvm", "validation")
    assert loaded.features.toarray().tolist() == [[1.5, 0, 0, 2], [0, 4, 0, 0]]
    assert loaded.labels.tolist() == [1, 0] and loaded.weights.tolist() == [1, 2]
    # A channel whose rows name fewer features gets the model's width.
    assert data.dmatrix(loaded, 6).num_col() == 6
    (tmp_path / "part").write_text("1,2,3\n")
    with pytest.raises(ValidationError, match="is not libsvm"):
        data.load(tmp_path, "libsvm", "train")
    (tmp_path / "part").write_text("1 qid:3 0:1\n")
    with pytest.raises(ValidationError, match="qid"):
        data.load(tmp_path, "libsvm", "train")


def test_parquet_label_first(tmp_path):
    pd.DataFrame({"label": [1.0, 0.0], "f0": [0.25, 0.5], "f1": [3, 4]}).to_parquet(tmp_path / "x.parquet")
    loaded = data.load(tmp_path, "parquet", "train")
    assert loaded.labels.tolist() == [1, 0] and loaded.features.tolist() == [[0.25, 3], [0.5, 4]]


def test_an_empty_channel_directory_is_no_data(tmp_path):
    assert data.load(tmp_path, "csv", "train") is None


def _instance(tmp_path, monkeypatch, hyperparameters: dict, channels: dict) -> Layout:
    """One instance's /opt/ml, as the agent writes it."""
    layout = Layout(tmp_path / "ml")
    layout.input_config_dir.mkdir(parents=True)
    (layout.input_config_dir / "hyperparameters.json").write_text(json.dumps(hyperparameters))
    (layout.input_config_dir / "inputdataconfig.json").write_text(json.dumps(
        {name: {"ContentType": content_type, "TrainingInputMode": "File", "S3DistributionType": "FullyReplicated"}
         for name, (content_type, _) in channels.items()}))
    (layout.input_config_dir / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-1",
                                                                            "hosts": ["algo-1"]}))
    for name, (_, files) in channels.items():
        layout.channel_dir(name).mkdir(parents=True)
        for file_name, text in files.items():
            (layout.channel_dir(name) / file_name).write_text(text)
    monkeypatch.setenv("SM_INPUT_DIR", str(layout.input_dir))
    return layout


@pytest.mark.filterwarnings("ignore:.*Unknown file format")   # XGBoost's, for a model file named without extension
def test_the_algorithm_trains_on_libsvm_by_default(tmp_path, monkeypatch, capsys):
    rows = "".join(f"{i % 2} 0:{i % 2 + 0.1 * (i % 5)} 1:{i % 7}\n" for i in range(200))
    layout = _instance(tmp_path, monkeypatch, {"num_round": "3", "objective": "binary:logistic",
                                               "eval_metric": "error"},
                       {"train": (None, {"train.libsvm": rows}), "validation": ("libsvm", {"v": rows})})
    assert main() == 0
    lines = capsys.readouterr().out.splitlines()
    assert "[xgboost] channel train: 200 rows (libsvm, FullyReplicated)" in lines
    assert "[2]#011train-error:0.00000 #011validation-error:0.00000" in lines
    booster = xgboost.Booster()
    booster.load_model(str(layout.model_dir / "xgboost-model"))
    assert booster.num_boosted_rounds() == 3
    assert np.round(booster.predict(xgboost.DMatrix(np.array([[1.1, 3.0], [0.2, 3.0]])))).tolist() == [1, 0]


@pytest.mark.parametrize(("hyperparameters", "channels", "says"), [
    ({"num_round": "3"}, {"validation": ("text/csv", {"v.csv": "1,2\n"})}, "needs a 'train' channel"),
    ({"num_round": "3"}, {"train": ("text/csv", {"t.csv": "y,x\n1,2\n"})}, "no header line"),
    ({"num_round": "3"}, {"train": ("text/csv", {"t.csv": "1,2\n"}), "test": ("text/csv", {"t.csv": "1,2\n"})},
     "reads 'train' and 'validation' only"),
    ({"num_round": "3", "early_stopping_rounds": "2"}, {"train": ("text/csv", {"t.csv": "1,2\n"})},
     "give a 'validation' channel"),
    ({"num_rounds": "3"}, {"train": ("text/csv", {"t.csv": "1,2\n"})}, "did you mean 'num_round'?"),
])
def test_what_the_algorithm_cannot_train_on_is_a_client_error(tmp_path, monkeypatch, hyperparameters, channels, says):
    layout = _instance(tmp_path, monkeypatch, hyperparameters, channels)
    assert main() == 2
    failure = layout.failure_file.read_text()
    assert failure.startswith("ClientError: ") and says in failure
    assert not (layout.model_dir / "xgboost-model").exists()


@pytest.mark.parametrize(("inputs", "field", "says"), [
    ({"training": "file:///tmp"}, "channels", "reads 'train' and 'validation' only"),
    ({"validation": "file:///tmp"}, "channels", "needs a 'train' channel"),
    ({"train": TrainingInput("file:///tmp", content_type="application/x-recordio-protobuf")},
     "channel train: content_type", "RecordIO-protobuf is not supported"),
    ({"train": TrainingInput("file:///tmp", content_type="text/csv", input_mode="Pipe")}, "channel train: input_mode",
     "reads files"),
])
def test_channels_the_algorithm_cannot_read_are_refused_before_anything_runs(home, inputs, field, says):
    estimator = Estimator(image_uri=image_uris.retrieve("xgboost", "us-east-1", "1.7-1"), role="r",
                          instance_count=1, instance_type="local", hyperparameters={"num_round": 2})
    with pytest.raises(ValidationError, match=says) as error:
        estimator.fit(inputs)
    assert error.value.field == f"job.{field}"   # the job's own check, before it is submitted
    assert not (home / "jobs").exists()
