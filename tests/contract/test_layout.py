from pathlib import Path

import pytest

from shipyard.contract.layout import MARKER, SANDBOX_BASE, Layout
from shipyard.errors import ValidationError


def test_sandbox_paths_are_the_opt_ml_tree():
    layout = Layout(SANDBOX_BASE)
    expected = {
        "base": "/opt/ml",
        "input_dir": "/opt/ml/input",
        "input_config_dir": "/opt/ml/input/config",
        "input_data_dir": "/opt/ml/input/data",
        "code_dir": "/opt/ml/code",
        "model_dir": "/opt/ml/model",
        "output_dir": "/opt/ml/output",
        "output_data_dir": "/opt/ml/output/data",
        "output_intermediate_dir": "/opt/ml/output/intermediate",
        "checkpoints_dir": "/opt/ml/checkpoints",
        "failure_file": "/opt/ml/output/failure",
        "success_file": "/opt/ml/output/success",
        "hyperparameters_file": "/opt/ml/input/config/hyperparameters.json",
        "resourceconfig_file": "/opt/ml/input/config/resourceconfig.json",
        "inputdataconfig_file": "/opt/ml/input/config/inputdataconfig.json",
    }
    for name, path in expected.items():
        value = getattr(layout, name)
        assert isinstance(value, Path), name
        assert str(value) == path, name
    assert str(layout.channel_dir("train")) == "/opt/ml/input/data/train"
    assert str(layout.channel_dir("Train.v2")) == "/opt/ml/input/data/Train.v2"


def test_paths_follow_base_and_accept_a_str(tmp_path):
    layout = Layout(str(tmp_path / "algo-1"))
    assert layout.base == tmp_path / "algo-1"
    assert layout.model_dir == tmp_path / "algo-1" / "model"
    assert layout.output_data_dir == tmp_path / "algo-1" / "output" / "data"


def test_layout_is_frozen_and_hashable():
    layout = Layout(SANDBOX_BASE)
    with pytest.raises(AttributeError):
        layout.base = Path("/tmp")  # type: ignore[misc]
    assert layout == Layout(Path("/opt/ml"))
    assert hash(layout) == hash(Layout(Path("/opt/ml")))


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../x", "a\\b"])
def test_channel_dir_refuses_names_that_leave_input_data(name):
    with pytest.raises(ValidationError):
        Layout(SANDBOX_BASE).channel_dir(name)


def test_create_makes_the_whole_tree(tmp_path):
    layout = Layout(tmp_path / "opt" / "ml")
    layout.create(["train", "test"])
    for path in [layout.input_config_dir, layout.channel_dir("train"), layout.channel_dir("test"),
                 layout.code_dir, layout.model_dir, layout.output_data_dir, layout.output_intermediate_dir,
                 layout.checkpoints_dir]:
        assert path.is_dir(), path
    assert sorted(p.name for p in layout.input_data_dir.iterdir()) == ["test", "train"]
    # No files: failure/success and the configs are written by others.
    assert [p for p in layout.base.rglob("*") if p.is_file()] == []


def test_create_is_idempotent_and_keeps_content(tmp_path):
    layout = Layout(tmp_path)
    layout.create()
    (layout.model_dir / "weights.bin").write_text("x")
    layout.create(["train"])
    assert (layout.model_dir / "weights.bin").read_text() == "x"
    assert layout.channel_dir("train").is_dir()


def test_create_refuses_a_bad_channel_before_making_anything(tmp_path):
    layout = Layout(tmp_path / "ml")
    with pytest.raises(ValidationError):
        layout.create(["ok", ".."])
    assert not (tmp_path / "ml").exists()


def test_the_checkpoint_marker_is_one_constant_of_the_contract():
    from shipyard.parallel import checkpoint
    from shipyard.runtime import checkpoints

    assert MARKER == ".complete"  # documented in docs/checkpoints.md: scripts write this name
    assert checkpoints.MARKER is MARKER and checkpoint.MARKER is MARKER
