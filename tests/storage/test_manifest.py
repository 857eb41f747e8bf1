"""Reading SageMaker's ManifestFile and AugmentedManifestFile: what a good one gives, and that a bad one
fails naming the element or line to fix."""

from __future__ import annotations

import json

import pytest

from shipyard.errors import StorageError, ValidationError
from shipyard.storage.manifest import check_objects, listing, read_augmented, read_manifest


def _write(tmp_path, content, name="data.manifest") -> str:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def test_read_manifest_keeps_the_manifest_order(tmp_path):
    uri = _write(tmp_path, [{"prefix": "s3://bucket/train/"}, "b/2.csv", "a/1.csv", "c.csv"])
    assert read_manifest(uri) == ("s3://bucket/train/", ["b/2.csv", "a/1.csv", "c.csv"])
    assert read_manifest(f"file://{uri}")[1] == ["b/2.csv", "a/1.csv", "c.csv"]


@pytest.mark.parametrize("content, message", [
    ("not json", r"is not JSON .*it must be a JSON array: \[\{\"prefix\""),
    ({"prefix": "s3://b/"}, "is a JSON object; it must be a JSON array"),
    ([], "is an empty JSON array"),
    (["s3://b/x", "k"], 'element 0 is "s3://b/x"; it must be {"prefix": '),
    ([{"prefix": "s3://b/", "extra": 1}, "k"], "element 0 is .*extra"),
    ([{"prefix": "s3://b/"}], "lists no objects"),
    ([{"prefix": "s3://b/data"}, "k"], "prefix 's3://b/data' must end with '/'; write 's3://b/data/'"),
    ([{"prefix": "ftp://b/"}, "k"], "ftp:// is not supported"),
    ([{"prefix": "s3://b/"}, "ok", 3], "element 2 is 3; it must be a non-empty string"),
    ([{"prefix": "s3://b/"}, ""], 'element 1 is ""'),
    ([{"prefix": "s3://b/"}, "a", "../escape"], r"element 2 \('../escape'\) would name an object outside"),
    ([{"prefix": "s3://b/"}, "sub/../../x"], "outside the prefix"),
    ([{"prefix": "s3://b/"}, "/etc/passwd"], "outside the prefix"),
])
def test_a_bad_manifest_names_what_to_fix(tmp_path, content, message):
    with pytest.raises(StorageError, match=message):
        read_manifest(_write(tmp_path, content))


def test_a_missing_manifest(tmp_path):
    with pytest.raises(StorageError, match="manifest .*nope.manifest does not exist"):
        read_manifest(str(tmp_path / "nope.manifest"))


def test_check_objects_names_the_first_missing_key_in_manifest_order(tmp_path):
    (tmp_path / "data" / "sub").mkdir(parents=True)
    (tmp_path / "data" / "a").write_bytes(b"aaa")
    (tmp_path / "data" / "sub" / "b").write_bytes(b"b")
    prefix = f"file://{tmp_path}/data/"
    assert {key: size for key, (size, _) in check_objects(prefix, ["sub/b", "a"]).items()} == {"sub/b": 1, "a": 3}
    with pytest.raises(StorageError, match=r"data/z does not exist \(2 of 4 keys are missing\)"):
        check_objects(prefix, ["a", "z", "sub/b", "m"])
    with pytest.raises(StorageError, match="data/z does not exist; fix the manifest"):
        check_objects(prefix, ["z"])


def test_check_objects_lists_the_prefix_once(s3):
    bucket = s3.bucket("man")
    for key in ("a", "b/c", "d"):
        s3.put(f"{bucket}/train/{key}", key.encode())
    s3.put(f"{bucket}/train-other/a", b"not under train/")
    assert {key: size for key, (size, _) in listing(f"{bucket}/train/").items()} == {"a": 1, "b/c": 3, "d": 1}
    from shipyard.storage.uri import filesystem

    fs, _ = filesystem(f"{bucket}/train/")
    calls = []
    original = fs.call_s3
    fs.call_s3 = lambda method, **kwargs: calls.append(method) or original(method, **kwargs)  # counts, still lists
    try:
        found = check_objects(f"{bucket}/train/", ["d", "b/c", "a"])
        assert list(found) == ["d", "b/c", "a"] and [size for size, _ in found.values()] == [1, 3, 1]
        assert all(identity.startswith('"') for _, identity in found.values())   # S3's ETags
    finally:
        del fs.call_s3
    assert calls == ["list_objects_v2"]


AUGMENTED = [
    {"source-ref": "s3://bucket/img/1.jpg", "class": 3, "meta": {"w": 2}},
    {"source-ref": "file:///data/2.jpg", "class": "cat", "meta": None},
    {"source-ref": "/data/3.jpg", "class": [1, 2], "meta": 1},
]


def test_read_augmented_lines_skipping_blank_ones(tmp_path):
    text = "\n".join(json.dumps(line) for line in AUGMENTED[:2]) + "\n\n  \n" + json.dumps(AUGMENTED[2]) + "\n"
    assert read_augmented(_write(tmp_path, text), ["source-ref", "class"]) == AUGMENTED


@pytest.mark.parametrize("lines, message", [
    ([AUGMENTED[0], {"source-ref": "s3://b/x"}], "line 2 has no attribute 'class' \\(it has 'source-ref'\\)"),
    ([AUGMENTED[0], "{not json"], "line 2 is not JSON"),
    (["[1, 2]"], "line 1 is a JSON array; each line must be one JSON object"),
    ([{"source-ref": 5, "class": 1}], "line 1: source-ref is 5; a '-ref' attribute must be an object URI"),
    ([{"source-ref": "http://host/x.jpg", "class": 1}], "line 1: source-ref: .*http:// is not supported"),
    ([{"source-ref": "s3:/b/x", "class": 1}], "line 1: source-ref: .*needs two slashes"),
])
def test_a_bad_augmented_manifest_names_the_line(tmp_path, lines, message):
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    with pytest.raises(StorageError, match=message):
        read_augmented(_write(tmp_path, text), ["source-ref", "class"])


def test_an_augmented_manifest_needs_attribute_names_and_lines(tmp_path):
    with pytest.raises(ValidationError, match="attribute_names"):
        read_augmented(_write(tmp_path, json.dumps(AUGMENTED[0])), [])
    with pytest.raises(StorageError, match="has no lines"):
        read_augmented(_write(tmp_path, "\n\n"), ["class"])
