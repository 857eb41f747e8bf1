"""Input modes' bad inputs: each refused before anything is written or started, naming the channel's field,
the value and the fix (issue: an unknown mode, Gzip or RecordIO outside Pipe, a bad manifest, FastFile with
a manifest or a prefix ending part-way through a name, a missing file system directory, a channel name
that is no directory name)."""

from __future__ import annotations

import json

import pytest

from shipyard import Estimator
from shipyard.errors import ValidationError
from shipyard.inputs import FileSystemInput, ShuffleConfig, TrainingInput
from shipyard.store import Store


def _nothing_happened(home):
    assert Store(home).list_jobs() == []
    assert not (home / "output").exists()


@pytest.fixture
def data(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    for name in ("a.csv", "b.csv"):
        (folder / name).write_text("1\n")
    return folder


def _fit(script, inputs, **kwargs):
    Estimator(entry_point="train.py", source_dir=str(script), **kwargs).fit(inputs, wait=False)


@pytest.mark.parametrize(("inputs", "kwargs", "field", "message"), [
    (lambda d: TrainingInput(str(d), input_mode="Fastfile"), {}, r"inputs\['training'\]\.input_mode",
     "did you mean 'FastFile'"),
    (lambda d: str(d), {"input_mode": "pipe"}, r"^input_mode", "did you mean 'Pipe'"),
    (lambda d: TrainingInput(str(d), compression="Gzip"), {}, r"compression", "only in Pipe mode"),
    (lambda d: TrainingInput(str(d), compression="Zip", input_mode="Pipe"), {}, r"compression", "'Gzip'"),
    (lambda d: TrainingInput(str(d), record_wrapping="RecordIO", input_mode="FastFile"), {}, r"record_wrapping",
     "only in Pipe mode"),
    (lambda d: TrainingInput(str(d / "m.json"), s3_data_type="AugmentedManifestFile", attribute_names=["x"]), {},
     r"s3_data_type", "only in Pipe mode"),
    (lambda d: TrainingInput(str(d / "m.json"), s3_data_type="ManifestFile", input_mode="FastFile"), {},
     r"s3_data_type", "FastFile mounts an S3Prefix only"),
    (lambda d: TrainingInput(str(d), shuffle_config=ShuffleConfig(seed="x")), {}, r"shuffle_config",
     "integer seed"),
    (lambda d: {"..": str(d)}, {}, r"name", "not a directory name"),
    (lambda d: {"a/b": str(d)}, {}, r"name", "not a directory name"),
    (lambda d: FileSystemInput("fs-1", "EFS", str(d / "missing")), {}, r"directory_path", "no such directory"),
    (lambda d: FileSystemInput("fs-1", "Lustre", str(d)), {}, r"file_system_type", "EFS"),
    (lambda d: FileSystemInput("fs-1", "EFS", str(d), "rw"), {}, r"file_system_access_mode", "read-only"),
])
def test_refused_before_anything_happens(home, script, data, inputs, kwargs, field, message):
    with pytest.raises(ValidationError) as error:
        _fit(script, inputs(data), **kwargs)
    assert __import__("re").search(field, error.value.field), error.value
    assert message in str(error.value)
    _nothing_happened(home)


@pytest.mark.parametrize(("manifest", "message"), [
    (None, "does not exist"),
    ("not json", "is not JSON"),
    ({"prefix": "x"}, "must be a JSON array"),
    ([{"prefix": "PREFIX"}, "a.csv", "missing-1.csv", "missing-2.csv"], "missing-1.csv"),
    ([{"prefix": "PREFIX"}, "../escape.csv"], "escape"),
])
def test_bad_manifest_names_what_to_fix(home, script, data, manifest, message):
    path = data.parent / "train.manifest"
    if manifest is not None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest).replace("PREFIX", f"{data.as_uri()}/")
        path.write_text(text)
    with pytest.raises(ValidationError, match=r"inputs\['train'\]") as error:
        _fit(script, {"train": TrainingInput(str(path), s3_data_type="ManifestFile")})
    assert message in str(error.value)
    _nothing_happened(home)


def test_fastfile_prefix_ending_part_way_through_a_name(home, script, s3):
    bucket = s3.bucket("names")
    s3.put(f"{bucket}/train/a.csv", b"1\n")
    s3.put(f"{bucket}/train-01/b.csv", b"2\n")
    with pytest.raises(ValidationError, match=r"ends part-way through a name.*train-01.*s3://names/train/"):
        _fit(script, TrainingInput(f"{bucket}/train", input_mode="FastFile"))
    _nothing_happened(home)
    # The same prefix is fine with the slash, or in File mode (which copies every key under it).
    Estimator(entry_point="train.py", source_dir=str(script)).plan(TrainingInput(f"{bucket}/train/",
                                                                                input_mode="FastFile"))


def test_fastfile_with_an_unknown_server(home, script, data, monkeypatch):
    monkeypatch.setenv("SHIPYARD_FASTFILE", "fuse")
    with pytest.raises(ValidationError, match=r"SHIPYARD_FASTFILE='fuse': must be auto or rclone"):
        _fit(script, TrainingInput(str(data), input_mode="FastFile"))
    _nothing_happened(home)


def test_fastfile_without_rclone(home, script, data, monkeypatch):
    monkeypatch.setenv("PATH", str(data))   # no rclone on it
    with pytest.raises(ValidationError, match=r"FastFile needs rclone.*apt-get install rclone fuse3"):
        _fit(script, TrainingInput(str(data), input_mode="FastFile"))
    _nothing_happened(home)
