"""Pipe input mode for real: the streamer writes real FIFOs, a reader (this test, a DataLoader, a TensorFlow
script in its own process) reads them. Objects are local files, and S3 on the moto server."""

from __future__ import annotations

import gzip
import json
import os
import random
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import shipyard.runtime
from shipyard.errors import StorageError, ValidationError
from shipyard.runtime import pipe
from shipyard.runtime.config import ChannelSource
from shipyard.runtime.pipe_reader import next_epoch, read_records
from shipyard.storage import transfer

pytestmark = pytest.mark.timeout(120)

INJECT = Path(shipyard.runtime.__file__).parent / "inject"
MAGIC = bytes.fromhex("0a23d7ce")  # 0xced7230a, little-endian


def _objects(root: Path, files: dict[str, bytes]) -> Path:
    for key, data in files.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
    return root


def _channel(uri, **fields) -> ChannelSource:
    return ChannelSource("train", str(uri), input_mode="Pipe", **fields)


def _wait(path: Path, timeout: float = 20.0) -> Path:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)
    return path


def _read(data: Path, epoch: int, name: str = "train") -> bytes:
    with open(_wait(data / f"{name}_{epoch}"), "rb") as reader:
        return reader.read()


def _records(data: Path, epoch: int) -> list[bytes]:
    return list(read_records(data / f"train_{epoch}", "RecordIO", timeout=20))


@pytest.fixture
def stream(tmp_path):
    """start(channel, ...) -> (streamer, errors, its data directory); every streamer is stopped at the end."""
    started = []

    def run(channel, host_index=0, host_count=1, **options):
        data = tmp_path / f"data-{len(started)}"
        data.mkdir()
        errors: list[str] = []
        streamer = pipe.start(channel, data, host_index, host_count, errors.append, **options)
        started.append(streamer)
        return streamer, errors, data

    yield run
    for streamer in started:
        streamer.stop()


FILES = {"b": b"B" * 10, "a": b"A" * 5, "sub/c": b"C" * 3}
IN_ORDER = b"A" * 5 + b"B" * 10 + b"C" * 3  # sorted keys: a, b, sub/c


def test_each_epoch_pipe_appears_after_the_last_was_read_to_its_end(tmp_path, stream):
    streamer, errors, data = stream(_channel(_objects(tmp_path / "src", FILES)))
    for epoch in range(3):
        with open(_wait(data / f"train_{epoch}"), "rb", buffering=0) as reader:
            first = reader.read(4)
            time.sleep(0.3)  # time enough for a next pipe to appear, if it were made too early
            assert sorted(p.name for p in data.iterdir()) == [f"train_{epoch}"]
            assert first + reader.read() == IN_ORDER
        _wait(data / f"train_{epoch + 1}")
        assert not (data / f"train_{epoch}").exists()
    assert errors == [] and streamer.running


def test_a_reader_closing_early_ends_the_epoch(tmp_path, stream):
    big = random.Random(1).randbytes(3 * 1024 * 1024)  # more than the pipe holds: the writer is mid-stream
    _, errors, data = stream(_channel(_objects(tmp_path / "src", {"big": big})), chunk_size=64 * 1024)
    with open(_wait(data / "train_0"), "rb", buffering=0) as reader:
        assert reader.read(100) == big[:100]
    assert _read(data, 1) == big
    assert errors == []


def test_stop_ends_a_writer_waiting_for_its_reader_or_for_reading(tmp_path, stream):
    src = _objects(tmp_path / "src", {"big": b"x" * (3 * 1024 * 1024)})
    idle, errors, data = stream(_channel(src))
    _wait(data / "train_0")
    began = time.monotonic()
    idle.stop()
    assert time.monotonic() - began < 1.0 and not idle.running
    assert list(data.iterdir()) == []

    busy, errors, data = stream(_channel(src))
    with open(_wait(data / "train_0"), "rb", buffering=0) as reader:
        reader.read(10)
        time.sleep(0.2)  # the writer has filled the pipe and waits
        began = time.monotonic()
        busy.stop()
        assert time.monotonic() - began < 1.0 and not busy.running
    assert list(data.iterdir()) == [] and errors == []


def test_recordio_frames_each_object_byte_for_byte(tmp_path, stream):
    files = {"k0": b"", "k1": b"x", "k2": b"abcd", "k3": b"hello"}
    _, errors, data = stream(_channel(_objects(tmp_path / "src", files), record_wrapping="RecordIO"))
    assert _read(data, 0) == (
        MAGIC + bytes.fromhex("00000000")
        + MAGIC + bytes.fromhex("01000000") + b"x" + b"\0\0\0"
        + MAGIC + bytes.fromhex("04000000") + b"abcd"
        + MAGIC + bytes.fromhex("05000000") + b"hello" + b"\0\0\0"
    )
    assert _records(data, 1) == list(files.values())
    assert errors == []


@pytest.mark.parametrize("wrapping", [None, "RecordIO"])
def test_gzip_objects_are_gunzipped_while_streaming(tmp_path, stream, wrapping):
    text = b"".join(b"line %d\n" % i for i in range(20000))  # ~200 KB: many chunks in, many out
    files = {"a.gz": gzip.compress(text), "b.gz": gzip.compress(b"x") + gzip.compress(b"yz"), "c.gz": b""}
    channel = _channel(_objects(tmp_path / "src", files), compression="Gzip", record_wrapping=wrapping)
    _, errors, data = stream(channel, chunk_size=4096)
    if wrapping:
        assert _records(data, 0) == [text, b"xyz", b""]
    else:
        assert _read(data, 0) == text + b"xyz"
    assert errors == []


def test_a_corrupt_gzip_object_fails_the_channel(tmp_path, stream):
    files = {"a.gz": gzip.compress(b"fine"), "b.gz": b"plain text, not gzip"}
    streamer, errors, data = stream(_channel(_objects(tmp_path / "src", files), compression="Gzip"))
    assert _read(data, 0) == b"fine"
    assert errors == ["channel train: object b.gz: cannot be gunzipped (Error -3 while decompressing data: "
                      "incorrect header check); store it gzipped or set compression None"]


ITEMS = [f"k{i:02d}" for i in range(20)]


def test_shuffle_is_deterministic_from_the_seed_and_differs_between_epochs():
    epochs = [pipe.epoch_items(ITEMS, epoch, 7, 0, 1, sharded=False) for epoch in range(3)]
    assert epochs[0] == pipe.epoch_items(ITEMS, 0, 7, 0, 1, sharded=False)
    assert all(sorted(order) == ITEMS for order in epochs)
    assert len({tuple(order) for order in [ITEMS, *epochs]}) == 4
    assert pipe.epoch_items(ITEMS, 0, 8, 0, 1, sharded=False) != epochs[0]
    expected = list(ITEMS)
    random.Random("7:1").shuffle(expected)  # the documented formula
    assert epochs[1] == expected
    assert all(pipe.epoch_items(ITEMS, epoch, None, 0, 1, sharded=False) == ITEMS for epoch in range(3))


@pytest.mark.parametrize("seed", [None, 7])
def test_shards_are_disjoint_and_complete_in_every_epoch(seed):
    shares = {epoch: [pipe.epoch_items(ITEMS, epoch, seed, host, 3, sharded=True) for host in range(3)]
              for epoch in range(4)}
    for epoch, hosts in shares.items():
        assert sorted(key for share in hosts for key in share) == ITEMS
        if seed is None:
            assert hosts == [transfer.shard(ITEMS, host, 3) for host in range(3)]
    moved = {frozenset(shares[epoch][0]) for epoch in shares}
    assert (len(moved) > 1) == (seed is not None)  # with a seed a host's share changes between epochs
    with pytest.raises(ValidationError, match="host_index"):
        pipe.epoch_items(ITEMS, 0, seed, 3, 3, sharded=True)


def test_a_manifest_streams_its_entries_in_its_order(tmp_path, stream):
    src = _objects(tmp_path / "src", FILES)
    manifest = tmp_path / "train.manifest"
    manifest.write_text(json.dumps([{"prefix": f"file://{src}/"}, "sub/c", "a", "b", "a"]))
    _, errors, data = stream(_channel(manifest, s3_data_type="ManifestFile"))
    assert _read(data, 0) == b"C" * 3 + b"A" * 5 + b"B" * 10 + b"A" * 5
    assert errors == []


def test_a_manifest_naming_a_missing_object_fails_before_any_pipe(tmp_path, stream):
    src = _objects(tmp_path / "src", FILES)
    manifest = tmp_path / "train.manifest"
    manifest.write_text(json.dumps([{"prefix": f"{src}/"}, "a", "gone", "also-gone"]))
    streamer, errors, data = stream(_channel(manifest, s3_data_type="ManifestFile"))
    streamer._thread.join(10)
    assert errors == [f"channel train: manifest object {src}/gone does not exist (2 of 3 keys are missing); fix "
                      "the manifest or upload the objects"]
    assert list(data.iterdir()) == []


def test_an_augmented_manifest_streams_each_lines_attributes_in_order(tmp_path, stream):
    src = _objects(tmp_path / "src", {"1.jpg": b"\xff\xd8one", "2.jpg": b"\xff\xd8two!"})
    lines = [{"source-ref": f"file://{src}/1.jpg", "class": 3, "meta": {"w": 2}, "unused": 0},
             {"source-ref": f"{src}/2.jpg", "class": "cat", "meta": [1, "a"]}]
    manifest = tmp_path / "train.manifest"
    manifest.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    channel = _channel(manifest, s3_data_type="AugmentedManifestFile", record_wrapping="RecordIO",
                       attribute_names=("class", "source-ref", "meta"))
    _, errors, data = stream(channel)
    assert _records(data, 0) == [b"3", b"\xff\xd8one", b'{"w": 2}', b"cat", b"\xff\xd8two!", b'[1, "a"]']
    assert errors == []


@pytest.mark.parametrize("change", ["delete", "truncate"])
def test_an_object_changed_mid_stream_ends_the_channel_with_only_right_bytes(tmp_path, stream, change):
    rng = random.Random(2)
    files = {"a": rng.randbytes(1000), "b": rng.randbytes(4 * 1024 * 1024), "c": rng.randbytes(1000)}
    src = _objects(tmp_path / "src", files)
    streamer, errors, data = stream(_channel(src), chunk_size=64 * 1024, ahead=2)
    expected = files["a"] + files["b"] + files["c"]
    with open(_wait(data / "train_0"), "rb", buffering=0) as reader:
        got = reader.read(100_000)
        if change == "delete":
            (src / "b").unlink()
        else:
            os.truncate(src / "b", 2 * 1024 * 1024 + 10)
        got += reader.read()
    assert got == expected[:len(got)] and len(got) < len(expected) - len(files["c"])
    streamer._thread.join(10)
    assert not streamer.running and list(data.iterdir()) == []
    (error,) = errors
    assert error.startswith("channel train: object b: ")
    if change == "delete":
        assert "FileNotFoundError" in error and "4 tries" in error
    else:
        assert "it ended at byte 2097162 but was listed with 4194304 bytes" in error


def test_an_s3_object_replaced_mid_stream_by_one_of_its_size_ends_the_channel_with_only_its_old_bytes(s3, stream):
    """Every range asks for the listing's ETag: the new object's bytes are refused, never spliced in."""
    bucket = s3.bucket("replaced")
    rng = random.Random(3)
    files = {"a": rng.randbytes(1000), "b": rng.randbytes(4 * 1024 * 1024), "c": rng.randbytes(1000)}
    for key, body in files.items():
        s3.put(f"{bucket}/train/{key}", body)
    streamer, errors, data = stream(_channel(f"{bucket}/train/"), chunk_size=64 * 1024, ahead=2)
    expected = files["a"] + files["b"] + files["c"]
    with open(_wait(data / "train_0"), "rb", buffering=0) as reader:
        got = reader.read(100_000)
        s3.put(f"{bucket}/train/b", rng.randbytes(len(files["b"])))
        got += reader.read()
    assert got == expected[:len(got)] and len(got) < len(expected) - len(files["c"])
    streamer._thread.join(10)
    (error,) = errors
    assert error.startswith("channel train: object b: ") and "4 tries" in error


def test_a_read_that_fails_for_a_moment_is_retried_from_the_same_byte(tmp_path, stream, monkeypatch):
    class Waits(tuple):   # BACKOFF, noting each wait before a new try
        taken: list[int] = []

        def __getitem__(self, index):
            self.taken.append(index)
            return tuple.__getitem__(self, index)

    monkeypatch.setattr(pipe, "BACKOFF", Waits(pipe.BACKOFF))
    rng = random.Random(4)
    files = {"a": rng.randbytes(1000), "b": rng.randbytes(300_000)}
    src = _objects(tmp_path / "src", files)
    _, errors, data = stream(_channel(src), chunk_size=64 * 1024, ahead=2)
    # Listed, and a and b's first range fetched ahead: b's second range is fetched once the reader has
    # taken a, which it opens after b is gone.
    _wait(data / "train_0")
    (src / "b").unlink()
    back = threading.Timer(0.3, lambda: (src / "b").write_bytes(files["b"]))
    back.start()
    assert _read(data, 0) == files["a"] + files["b"]
    back.join()
    assert errors == [] and Waits.taken[0] == 0


def test_a_channel_without_objects_is_reported(tmp_path, stream):
    streamer, errors, data = stream(_channel(tmp_path / "empty"))
    streamer._thread.join(10)
    assert errors == [f"channel train: no objects under {tmp_path / 'empty'}; check the channel's URI"]
    assert list(data.iterdir()) == []


def test_s3_shards_reshuffle_every_epoch_across_hosts(s3, stream):
    bucket = s3.bucket("pipe")
    files = {f"part-{i}": f"object {i};".encode() * (i + 1) for i in range(7)}
    for key, body in files.items():
        s3.put(f"{bucket}/train/{key}", body)
    channel = _channel(f"{bucket}/train", distribution="ShardedByS3Key", shuffle_seed=11,
                       record_wrapping="RecordIO")
    hosts = [stream(channel, host, 2)[2] for host in range(2)]
    seen = []
    for epoch in range(2):
        records = [_records(data, epoch) for data in hosts]
        for host, got in enumerate(records):
            keys = pipe.epoch_items(sorted(files), epoch, 11, host, 2, sharded=True)
            assert got == [files[key] for key in keys]
        assert sorted(record for got in records for record in got) == sorted(files.values())
        seen.append(records[0])
    assert seen[0] != seen[1]


def test_s3_stream_starts_on_the_listings_first_page(s3, stream, monkeypatch, tmp_path):
    bucket = s3.bucket("pipe")
    files = {f"part-{i}": f"object {i};".encode() * (i + 1) for i in range(7)}
    for key, body in files.items():
        s3.put(f"{bucket}/train/{key}", body)
    monkeypatch.setattr(pipe, "FIRST_PAGE", 2)
    from shipyard.storage import s3lite

    calls = []   # (request, keys asked for, whether the pipe was there)
    original = s3lite.Client.call_s3
    data = tmp_path / "data-0"   # the fixture's first streamer's
    monkeypatch.setattr(s3lite.Client, "call_s3", lambda self, method, **kw: calls.append(
        (method, kw.get("MaxKeys"), (data / "train_0").exists())) or original(self, method, **kw))
    _, errors, data = stream(_channel(f"{bucket}/train/", record_wrapping="RecordIO"))
    expected = [files[key] for key in sorted(files)]
    assert _records(data, 0) == expected
    # the pipe is there before the rest is listed
    assert calls == [("list_objects_v2", 2, False), ("list_objects_v2", 1000, True)]
    assert _records(data, 1) == expected          # a later epoch lists nothing again
    assert len(calls) == 2 and errors == []


def test_s3_object_deleted_mid_stream(s3, stream):
    bucket = s3.bucket("pipe")
    body = random.Random(3).randbytes(3 * 1024 * 1024)
    s3.put(f"{bucket}/train/big", body)
    streamer, errors, data = stream(_channel(f"{bucket}/train/"), chunk_size=64 * 1024, ahead=2)
    with open(_wait(data / "train_0"), "rb", buffering=0) as reader:
        got = reader.read(50_000)
        s3.client.delete_object(Bucket="pipe", Key="train/big")
        got += reader.read()
    assert got == body[:len(got)] and len(got) < len(body)
    streamer._thread.join(10)
    assert len(errors) == 1 and errors[0].startswith("channel train: object big: FileNotFoundError")


def test_read_records_formats(tmp_path):
    recordio = tmp_path / "recordio"
    # A record MXNet split at a magic word inside it (cflag 1 then 3): read back with the word in place.
    recordio.write_bytes(MAGIC + struct.pack("<I", 3) + b"one\0"
                         + MAGIC + struct.pack("<I", (1 << 29) | 2) + b"ab\0\0"
                         + MAGIC + struct.pack("<I", (3 << 29) | 1) + b"c\0\0\0")
    assert list(read_records(recordio)) == [b"one", b"ab" + MAGIC + b"c"]
    tfrecord = tmp_path / "tfrecord"
    tfrecord.write_bytes(b"".join(struct.pack("<QI", len(r), 0) + r + b"crc!" for r in (b"first", b"", b"3")))
    assert list(read_records(tfrecord, "TFRecord")) == [b"first", b"", b"3"]
    text = tmp_path / "text"
    text.write_bytes(b"a,1\nb,2\nlast")
    assert list(read_records(text, "TextLine")) == [b"a,1", b"b,2", b"last"]
    assert b"".join(read_records(text, "raw")) == b"a,1\nb,2\nlast"


def test_read_records_refuses_what_it_cannot_read(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(StorageError, match="not RecordIO: a header starts with 0x04034b50"):
        list(read_records(bad))
    bad.write_bytes(MAGIC + struct.pack("<I", 10) + b"short")
    with pytest.raises(StorageError, match="ends inside a RecordIO record"):
        list(read_records(bad))
    with pytest.raises(ValidationError, match="record_format"):
        list(read_records(bad, "CSV"))
    with pytest.raises(TimeoutError, match="train_9 did not appear within 0.2 s"):
        list(read_records(tmp_path / "train_9", timeout=0.2))


def test_pipe_dataset_reads_the_next_epoch_each_iteration(tmp_path, stream):
    from torch.utils.data import DataLoader

    from shipyard.runtime.pipe_reader import PipeDataset

    files = {f"{i}": f"record {i}".encode() for i in range(5)}
    channel = _channel(_objects(tmp_path / "src", files), shuffle_seed=5, record_wrapping="RecordIO")
    _, errors, data = stream(channel)
    dataset = PipeDataset("train", data_dir=data, state_dir=tmp_path / "state")
    expected = [[files[k] for k in pipe.epoch_items(sorted(files), epoch, 5, 0, 1, sharded=False)]
                for epoch in range(3)]
    assert list(DataLoader(dataset, batch_size=None)) == expected[0]
    # A worker process is made anew each epoch: the epoch counter lives in state_dir, not in the process.
    assert list(DataLoader(dataset, batch_size=None, num_workers=1)) == expected[1]
    assert list(PipeDataset("train", data_dir=data, state_dir=tmp_path / "state")) == expected[2]
    assert next_epoch("train", tmp_path / "state") == 3
    assert errors == []


def test_pipe_mode_dataset_in_tensorflow_reads_epoch_after_epoch(tmp_path, stream):
    files = {f"{i}": f"record {i}".encode() for i in range(4)}
    channel = _channel(_objects(tmp_path / "src", files), shuffle_seed=3, record_wrapping="RecordIO")
    _, errors, data = stream(channel)
    config = tmp_path / "config"
    config.mkdir()
    (config / "inputdataconfig.json").write_text(json.dumps({"train": {"TrainingInputMode": "Pipe"}}))
    script = f"""
import json
import tensorflow as tf
from sagemaker_tensorflow import PipeModeDataset
ds = PipeModeDataset(channel="train", record_format="RecordIO", state_dir={str(tmp_path / "state")!r},
                     pipe_dir={str(data)!r}, config_dir={str(config)!r})
epochs = [[r.decode() for r in ds.as_numpy_iterator()] for _ in range(2)]
epochs.append([r.decode() for r in ds.repeat(2).as_numpy_iterator()])
epochs.append([int(n) for n in list(ds.map(tf.strings.length).batch(4).as_numpy_iterator())[0]])
print(json.dumps(epochs))
"""
    env = {**os.environ, "PYTHONPATH": str(INJECT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    order = [[files[k].decode() for k in pipe.epoch_items(sorted(files), epoch, 3, 0, 1, sharded=False)]
             for epoch in range(5)]
    assert got[:2] == order[:2]
    assert got[2] == order[2] + order[3]  # each pass of .repeat() opens the next epoch
    assert got[3] == [len(r) for r in order[4]]
    assert errors == []


def test_pipe_mode_dataset_refuses_a_channel_not_in_pipe_mode(tmp_path):
    from shipyard.runtime.libraries.sagemaker_tensorflow import PipeModeDataset, PipeModeDatasetException

    (tmp_path / "inputdataconfig.json").write_text(json.dumps({"train": {"TrainingInputMode": "File"}}))
    with pytest.raises(PipeModeDatasetException, match="TrainingInputMode is 'File'; give the channel input_mode"):
        PipeModeDataset("train", config_dir=tmp_path, state_dir=tmp_path, pipe_dir=tmp_path)
    with pytest.raises(PipeModeDatasetException, match="not in the job's inputdataconfig.json"):
        PipeModeDataset("eval", config_dir=tmp_path, state_dir=tmp_path, pipe_dir=tmp_path)
