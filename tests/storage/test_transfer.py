from __future__ import annotations

import os
from pathlib import Path

import pytest

from shipyard.errors import StorageError, ValidationError
from shipyard.storage import transfer

FILES = {"a.csv": b"aaaa", "sub/b.csv": b"bb", "sub/deep/c.bin": b"c" * 1000, "z": b""}


@pytest.fixture(params=["local", "file", "s3"])
def tree(request, tmp_path):
    """A URI holding FILES, on each kind of storage."""
    if request.param == "s3":
        s3 = request.getfixturevalue("s3")
        bucket = s3.bucket("data")
        for key, data in FILES.items():
            s3.put(f"{bucket}/train/{key}", data)
        s3.put(f"{bucket}/train-other/x", b"not under train/")
        return f"{bucket}/train"
    root = tmp_path / "train"
    for key, data in FILES.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
    return str(root) if request.param == "local" else f"file://{root}"


def test_list_objects(tree):
    assert transfer.list_objects(tree) == sorted(FILES)
    assert transfer.list_objects(tree + "/") == sorted(FILES)
    assert transfer.list_objects(tree + "/sub/b.csv") == ["b.csv"]


def test_missing_prefix_is_an_error(tree):
    with pytest.raises(StorageError, match="does not exist"):
        transfer.list_objects(tree + "/nope")
    with pytest.raises(StorageError, match="does not exist"):
        transfer.download(tree + "/nope", Path("/tmp/never-written"))


def test_download_keeps_relative_paths_and_reports_progress(tree, tmp_path):
    calls = []
    dest = tmp_path / "dest"
    n = transfer.download(tree, dest, progress=lambda done, total: calls.append((done, total)))
    total = sum(map(len, FILES.values()))
    assert n == total
    got = {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert got == FILES
    assert calls[0] == (0, total) and calls[-1] == (total, total)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_download_selected_keys(tree, tmp_path):
    keys = transfer.shard(transfer.list_objects(tree), 1, 2)
    transfer.download(tree, tmp_path / "d", keys=keys)
    got = sorted(p.relative_to(tmp_path / "d").as_posix() for p in (tmp_path / "d").rglob("*") if p.is_file())
    assert got == sorted(keys) and got != sorted(FILES)


def test_download_single_file(tree, tmp_path):
    assert transfer.download(tree + "/sub/deep/c.bin", tmp_path / "d") == 1000
    assert (tmp_path / "d" / "c.bin").read_bytes() == b"c" * 1000


@pytest.mark.parametrize("key", ["../escape", "/etc/passwd", "sub/../../escape", ""])
def test_download_refuses_keys_outside_dest(tree, tmp_path, key):
    with pytest.raises(StorageError):
        transfer.download(tree, tmp_path / "d", keys=[key])
    assert not (tmp_path / "escape").exists()
    assert not (tmp_path / "d").exists()  # refused before anything was created


def test_download_unknown_key(tree, tmp_path):
    with pytest.raises(StorageError, match="no object"):
        transfer.download(tree, tmp_path / "d", keys=["missing.csv"])


def test_unknown_scheme(tmp_path):
    with pytest.raises(StorageError, match="scheme"):
        transfer.list_objects("bogus-proto://bucket/data")
    with pytest.raises(StorageError, match="scheme"):
        transfer.download("bogus-proto://bucket/data", tmp_path)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7, 10, 13])
@pytest.mark.parametrize("n_keys", [0, 1, 5, 10, 23])
def test_shard_properties(count, n_keys):
    keys = [f"part-{i:03d}" for i in range(n_keys)][::-1]  # unsorted input
    shares = [transfer.shard(keys, i, count) for i in range(count)]
    flat = [k for share in shares for k in share]
    assert sorted(flat) == sorted(keys)  # union is everything ...
    assert len(flat) == len(set(flat))  # ... and nothing twice
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1
    assert shares == [transfer.shard(list(reversed(keys)), i, count) for i in range(count)]  # order-free


def test_shard_is_round_robin():
    assert transfer.shard(["c", "a", "b", "d", "e"], 0, 2) == ["a", "c", "e"]
    assert transfer.shard(["c", "a", "b", "d", "e"], 1, 2) == ["b", "d"]


@pytest.mark.parametrize("index, count", [(2, 2), (-1, 2), (0, 0)])
def test_shard_rejects_bad_hosts(index, count):
    with pytest.raises(ValidationError):
        transfer.shard(["a"], index, count)


@pytest.fixture(params=["local", "s3"])
def target(request, tmp_path):
    if request.param == "s3":
        s3 = request.getfixturevalue("s3")
        return s3.bucket("out") + "/job/output"
    return str(tmp_path / "remote" / "job" / "output")


def test_upload_file_and_dir_round_trip(target, tmp_path):
    src = tmp_path / "model"
    for key, data in FILES.items():
        (src / key).parent.mkdir(parents=True, exist_ok=True)
        (src / key).write_bytes(data)
    assert transfer.upload_dir(src, target + "/model") == sum(map(len, FILES.values()))
    (tmp_path / "one.tar.gz").write_bytes(b"tarball")
    transfer.upload_file(tmp_path / "one.tar.gz", target + "/model.tar.gz")
    transfer.upload_file(tmp_path / "one.tar.gz", target + "/model.tar.gz")  # overwrite is fine
    assert transfer.list_objects(target) == sorted(["model.tar.gz", *(f"model/{k}" for k in FILES)])
    transfer.download(target, tmp_path / "back")
    assert (tmp_path / "back" / "model.tar.gz").read_bytes() == b"tarball"
    assert (tmp_path / "back" / "model" / "sub/deep/c.bin").read_bytes() == FILES["sub/deep/c.bin"]


def test_local_upload_leaves_no_temp_files(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 10)
    transfer.upload_file(tmp_path / "f", str(tmp_path / "out" / "f"))
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["f"]


def test_upload_missing_local_is_an_error(tmp_path):
    with pytest.raises(StorageError):
        transfer.upload_file(tmp_path / "nope", str(tmp_path / "x"))
    with pytest.raises(StorageError):
        transfer.upload_dir(tmp_path / "nope", str(tmp_path / "x"))


def test_many_objects_concurrently(s3, tmp_path):
    bucket = s3.bucket("many")
    for i in range(40):
        s3.put(f"{bucket}/p/{i:02d}/f", bytes([i]) * (i + 1))
    assert transfer.download(f"{bucket}/p", tmp_path / "d") == sum(range(1, 41))
    assert (tmp_path / "d" / "39" / "f").read_bytes() == bytes([39]) * 40


def test_s3_key_with_dotdot_is_refused_before_writing(s3, tmp_path):
    # S3 keys are strings: "train/../../escape" is a real object and lists as "../../escape".
    bucket = s3.bucket("sneaky")
    s3.put(f"{bucket}/train/a", b"1")
    s3.put(f"{bucket}/train/../../escape", b"evil")
    assert transfer.list_objects(f"{bucket}/train") == ["../../escape", "a"]
    dest = tmp_path / "x" / "dest"
    with pytest.raises(StorageError, match="escape"):
        transfer.download(f"{bucket}/train", dest)
    assert not (tmp_path / "x").exists() and not (tmp_path / "escape").exists()


def _spy_pieces(monkeypatch) -> list:
    """The pieces download() hands to its workers (key, start, end), as it hands them."""
    seen = []
    run_all = transfer._run_all

    def spy(work, items, what):
        seen.extend(items)
        return run_all(work, items, what)

    monkeypatch.setattr(transfer, "_run_all", spy)
    return seen


def test_a_large_object_is_fetched_in_ranges_side_by_side(tree, tmp_path, monkeypatch):
    """Issue 17, File mode at full speed: an object larger than two ranges is split, every range fetched by
    its own worker and written at its offset; the bytes are the object's."""
    monkeypatch.setattr(transfer, "RANGE", 256)
    pieces = _spy_pieces(monkeypatch)
    dest = tmp_path / "dest"
    assert transfer.download(tree, dest) == sum(map(len, FILES.values()))
    got = {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert got == FILES
    big = sorted((start, end) for key, start, end in pieces if key == "sub/deep/c.bin")
    assert big == [(0, 256), (256, 512), (512, 768), (768, 1000)]
    assert [(s, e) for key, s, e in pieces if key == "a.csv"] == [(0, 4)]   # small ones whole
    assert not list(dest.rglob("*.part"))


def test_what_an_earlier_copy_holds_unchanged_is_linked_not_fetched(tree, tmp_path):
    """An instance restarted (spot) links what its earlier attempt downloaded and that has not changed."""
    first, manifest = tmp_path / "first", {}
    transfer.download(tree, first, record=lambda key, size, identity, linked: manifest.update({key: [size, identity]}))
    assert sorted(manifest) == sorted(FILES)
    changed = "sub/b.csv"
    _rewrite(tree, changed, b"changed!")
    linked = []
    second = tmp_path / "second"
    fetched = transfer.download(tree, second, reuse=[(first, manifest)],
                                record=lambda key, size, identity, was: was and linked.append(key))
    assert fetched == len(b"changed!")                        # only what changed came over the wire
    assert sorted(linked) == sorted(set(FILES) - {changed})
    assert (second / changed).read_bytes() == b"changed!"
    assert (second / "a.csv").stat().st_ino == (first / "a.csv").stat().st_ino


def _rewrite(tree: str, key: str, data: bytes) -> None:
    import time

    from shipyard.storage.uri import filesystem

    time.sleep(0.01)   # a modification time of its own on local storage
    fs, root = filesystem(tree)
    with fs.open(f"{root.rstrip('/')}/{key}", "wb") as out:
        out.write(data)


def test_an_object_shorter_than_listed_is_never_kept(tree, tmp_path):
    """An object that changed between the listing and the read fails the copy; nothing half-right stays."""
    fs, root, single, objects = transfer.listing(tree)
    longer = (fs, root, single, {**objects, "a.csv": (40, objects["a.csv"][1])})
    dest = tmp_path / "dest"
    with pytest.raises(StorageError, match="a.csv changed while it was downloaded"):
        transfer.download(tree, dest, keys=["a.csv"], listed=longer)
    assert not list(dest.rglob("*"))


def test_download_asks_once_per_piece_and_never_heads_an_object(s3_proxy, s3, tmp_path, monkeypatch):
    """What the listing says (sizes, ETags) is what each GET needs: no HEAD per object, one listing, and
    each range guarded by the ETag the listing gave (If-Match)."""
    monkeypatch.setattr(transfer, "RANGE", 64 * 1024)
    bucket = s3.bucket("heads")
    bodies = {f"part-{i}": bytes([i]) * (1000 + i) for i in range(5)}
    bodies["big"] = os.urandom(300 * 1024)   # in ranges
    for key, body in bodies.items():
        s3.put(f"{bucket}/train/{key}", body)
    listed = transfer.listing(f"{bucket}/train/")
    s3_proxy.requests.clear()
    transfer.download(f"{bucket}/train/", tmp_path / "out", listed=listed)
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == bodies
    assert [r for r in s3_proxy.requests if r[0] != "GET"] == []
    assert not [path for method, path in s3_proxy.requests if "list-type" in path or "prefix=" in path]
    gets = [path for method, path in s3_proxy.requests]
    assert len(gets) == 5 + 5   # one per small object, one per 64 KiB range of the big one


def test_a_range_of_an_object_replaced_since_its_listing_is_refused(s3):
    """open_listed (File mode's ranges, FastFile's lazy files): the listing's ETag guards every range, so a
    same-size object put in between fails the read instead of giving its bytes."""
    bucket = s3.bucket("replaced")
    s3.put(f"{bucket}/data/k.bin", b"a" * 1000)
    fs, root, _, objects = transfer.listing(f"{bucket}/data/")
    with transfer.open_listed(fs, f"{root.rstrip('/')}/k.bin", *objects["k.bin"], cache_type="none") as src:
        src.seek(10)
        assert src.read(100) == b"a" * 100
    s3.put(f"{bucket}/data/k.bin", b"b" * 1000)
    with pytest.raises(OSError, match="k.bin"):
        with transfer.open_listed(fs, f"{root.rstrip('/')}/k.bin", *objects["k.bin"], cache_type="none") as src:
            src.seek(10)
            src.read(100)


def test_concatenate_on_s3_copies_what_it_can_in_place(s3_proxy, s3):
    """Objects (or what follows an offset in one) of at least S3's part minimum are part copies, their
    bytes never coming here; shorter ones and the bytes given are sent with their neighbours, topped up
    from the next object."""
    bucket = s3.bucket("parts")
    mib = 1 << 20
    objects = {"big": os.urandom(6 * mib), "small": b"s" * 100, "large": os.urandom(11 * mib), "tiny": b"t" * 3}
    for key, body in objects.items():
        s3.put(f"{bucket}/{key}", body)
    seen = []
    pieces = [f"{bucket}/big", b"HEAD", f"{bucket}/small", (f"{bucket}/large", 4), f"{bucket}/tiny", b"END"]
    size = transfer.concatenate(pieces, f"{bucket}/out/all", progress=lambda done, total: seen.append((done, total)))
    whole = objects["big"] + b"HEAD" + objects["small"] + objects["large"][4:] + objects["tiny"] + b"END"
    assert (size, s3.get(f"{bucket}/out/all")) == (len(whole), whole)
    assert s3_proxy.sent["parts/big"] == 0
    # "large" after its offset tops HEAD and "small" up to 5 MiB; the rest is copied, never read here.
    assert s3_proxy.sent["parts/large"] == transfer.S3_MIN_PART - 104
    assert seen[0] == (0, len(whole)) and seen[-1] == (len(whole), len(whole))


def test_concatenate_short_pieces_and_nothing(s3, tmp_path):
    bucket = s3.bucket("short")
    s3.put(f"{bucket}/a", b"aa")
    assert transfer.concatenate([f"{bucket}/a", f"{bucket}/a", b"!"], f"{bucket}/two") == 5
    assert s3.get(f"{bucket}/two") == b"aaaa!"
    assert transfer.concatenate([b"only"], f"{bucket}/none") == 4
    assert s3.get(f"{bucket}/none") == b"only"
    with pytest.raises(StorageError, match="could not assemble .*/missing"):
        transfer.concatenate([f"{bucket}/missing"], f"{bucket}/x")


def test_concatenate_local_files(tmp_path):
    for name, body in {"a": b"first ", "b": b"second"}.items():
        (tmp_path / name).write_bytes(body)
    out = tmp_path / "out" / "joined"
    assert transfer.concatenate([str(tmp_path / "a"), (f"file://{tmp_path}/b", 3), b"."], str(out)) == 10
    assert out.read_bytes() == b"first ond."
    assert sorted(p.name for p in out.parent.iterdir()) == ["joined"]   # no temporary file left
