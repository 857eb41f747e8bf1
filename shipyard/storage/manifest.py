"""SageMaker's manifests: a ManifestFile (a JSON array: `{"prefix": ...}`, then keys relative to it) and an
AugmentedManifestFile (JSON Lines, one object per record, whose `*-ref` attributes name objects), read and
checked so a bad manifest fails naming the entry or line to fix. Also one listing of a prefix with sizes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import PurePosixPath

from shipyard.errors import StorageError, ValidationError
from shipyard.storage.uri import check_form, filesystem
from shipyard.storage.transfer import pages

SHAPE = 'a JSON array: [{"prefix": "s3://bucket/prefix/"}, "relative/key-1", "relative/key-2", ...]'


def _read_text(uri: str) -> str:
    fs, path = filesystem(uri)
    try:
        return fs.cat_file(path).decode("utf-8")
    except FileNotFoundError:
        raise StorageError(f"manifest {uri} does not exist") from None
    except UnicodeDecodeError as exc:
        raise StorageError(f"manifest {uri} is not UTF-8 text ({exc})") from None
    except OSError as exc:
        raise StorageError(f"could not read manifest {uri}: {exc}") from exc


def read_manifest(uri: str) -> tuple[str, list[str]]:
    """(prefix URI, keys in manifest order) of the ManifestFile at `uri`; each object is prefix + key."""
    try:
        entries = json.loads(_read_text(uri))
    except json.JSONDecodeError as exc:
        raise StorageError(f"manifest {uri} is not JSON ({exc}); it must be {SHAPE}") from None
    if not isinstance(entries, list) or not entries:
        raise StorageError(f"manifest {uri} is {_json_type(entries)}; it must be {SHAPE}")
    head = entries[0]
    if not (isinstance(head, dict) and set(head) == {"prefix"} and isinstance(head["prefix"], str)):
        raise StorageError(f"manifest {uri}: element 0 is {json.dumps(head)[:120]}; it must be "
                           f'{{"prefix": "s3://bucket/prefix/"}}, the prefix every key is relative to')
    prefix = head["prefix"]
    # Keys are appended to the prefix; without the slash "s3://b/data" + "x" would not name data/x.
    if not prefix.endswith("/"):
        raise StorageError(f"manifest {uri}: prefix {prefix!r} must end with '/'; write {prefix + '/'!r}")
    check_form(prefix)
    if len(entries) == 1:
        raise StorageError(f"manifest {uri} lists no objects: add keys after the prefix ({SHAPE})")
    for index, key in enumerate(entries[1:], 1):
        _check_key(uri, index, key)
    return prefix, entries[1:]


def _json_type(value: object) -> str:
    if value == []:
        return "an empty JSON array"
    names = {dict: "a JSON object", list: "a JSON array", str: "a JSON string", bool: "a JSON boolean",
             type(None): "JSON null"}
    return names.get(type(value), "a JSON number")


def _check_key(uri: str, index: int, key: object) -> None:
    if not isinstance(key, str) or not key:
        raise StorageError(f"manifest {uri}: element {index} is {json.dumps(key)[:120]}; it must be a "
                           "non-empty string, a key relative to the prefix")
    if key.startswith("/") or "\\" in key or ".." in PurePosixPath(key).parts or "://" in key:
        raise StorageError(f"manifest {uri}: element {index} ({key!r}) would name an object outside the prefix; "
                           "keys must be relative to it, without '..' or a leading '/'")


def listing(prefix: str) -> dict[str, tuple[int, str]]:
    """{key relative to `prefix`: (size, identity)} of every object under it (a folder-like prefix), sorted
    by key, in one listing; {} when there are none."""
    return {key: listed for page in pages(*filesystem(prefix)) for key, listed in page.items()}


def check_objects(prefix: str, keys: Sequence[str]) -> dict[str, tuple[int, str]]:
    """{key: (size, identity)} for `keys` under `prefix`, from one listing; StorageError naming the first key
    (in the given order) that is not there."""
    listed = listing(prefix)
    missing = [key for key in keys if key not in listed]
    if missing:
        more = f" ({len(missing)} of {len(keys)} keys are missing)" if len(missing) > 1 else ""
        raise StorageError(f"manifest object {prefix}{missing[0]} does not exist{more}; fix the manifest or "
                           "upload the objects")
    return {key: listed[key] for key in keys}


def read_augmented(uri: str, attribute_names: Sequence[str]) -> list[dict]:
    """The lines of the AugmentedManifestFile at `uri`, each checked to hold every one of
    `attribute_names`, and every `*-ref` attribute among them to be an object URI. Blank lines are skipped."""
    if not attribute_names:
        raise ValidationError("attribute_names", list(attribute_names),
                              "name the attributes each line streams, in order, e.g. ['source-ref', 'class']")
    lines = []
    for number, line in enumerate(_read_text(uri).splitlines(), 1):
        if line.strip():
            lines.append(_augmented_line(uri, number, line, attribute_names))
    if not lines:
        raise StorageError(f"augmented manifest {uri} has no lines; it must hold one JSON object per line")
    return lines


def _augmented_line(uri: str, number: int, line: str, attribute_names: Sequence[str]) -> dict:
    where = f"augmented manifest {uri} line {number}"
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise StorageError(f"{where} is not JSON ({exc}); each line must be one JSON object") from None
    if not isinstance(record, dict):
        raise StorageError(f"{where} is {_json_type(record)}; each line must be one JSON object")
    for name in attribute_names:
        if name not in record:
            raise StorageError(f"{where} has no attribute {name!r} (it has {', '.join(map(repr, record))}); "
                               "every line needs every name in attribute_names")
        if name.endswith("-ref"):
            _check_ref(where, name, record[name])
    return record


def _check_ref(where: str, name: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise StorageError(f"{where}: {name} is {json.dumps(value)[:120]}; a '-ref' attribute must be an object "
                           "URI (s3://bucket/key, file:///path or a path)")
    try:
        check_form(value)
    except StorageError as exc:
        raise StorageError(f"{where}: {name}: {exc}") from None
