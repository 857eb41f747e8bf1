"""fit()'s `inputs` as the job's channels, each checked against what it names before anything runs: the
prefix, the manifest and the objects it lists, the file system directory (docs/input-modes.md)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any

from shipyard import settings
from shipyard.errors import StorageError, ValidationError
from shipyard.sdk.inputs import FileSystemInput, ShuffleConfig, TrainingInput
from shipyard.spec.build import build as build_model
from shipyard.spec.job import ChannelSpec

def absolute(uri: Any, field: str) -> str:
    """A plain relative path means the caller's directory, wherever the job's processes run."""
    from shipyard.storage.uri import check_form, looks_like_uri

    if not isinstance(uri, (str, Path)):
        raise ValidationError(field, uri, "give a URI (s3://bucket/prefix, file:///path) or a local path")
    uri = str(uri)
    try:
        check_form(uri)
    except StorageError as exc:
        raise ValidationError(field, uri, str(exc).removeprefix(f"{uri}: ")) from None
    return uri if looks_like_uri(uri) else str(Path(uri).expanduser().resolve())


def check_uri_exists(field: str, uri: str) -> None:
    from shipyard.storage import uri as uris

    with _as_field(field, uri):
        found = uris.exists(uri)
    if not found:
        raise ValidationError(field, uri, "does not exist; check the path or the bucket and prefix")


@contextmanager
def _as_field(field: str, uri: str):
    """A storage failure while checking `field` as its ValidationError."""
    try:
        yield
    except ValidationError:
        raise
    except StorageError as exc:
        raise ValidationError(field, uri, str(exc).removeprefix(f"{uri}: ")) from None
    except Exception as exc:  # a filesystem that cannot even be asked (bad endpoint, no credentials)
        from shipyard.storage.uri import storage_problem

        raise ValidationError(field, uri, f"cannot be read: {storage_problem(exc)}") from None


def job_input_mode(inputs: Any, default: str) -> str:
    """The job's TrainingInputMode: a single TrainingInput's own mode overrides the estimator's, as in
    SageMaker's SDK."""
    return inputs.input_mode if isinstance(inputs, TrainingInput) and inputs.input_mode else default


def channels(inputs: Any, job_mode: str) -> tuple[ChannelSpec, ...]:
    if inputs is None:
        return ()
    if isinstance(inputs, (str, TrainingInput, FileSystemInput)):
        inputs = {"training": inputs}
    if not isinstance(inputs, dict):
        raise ValidationError("inputs", inputs, "pass a URI, a TrainingInput, a FileSystemInput, or a dict of "
                              "channel name to any of them")
    return tuple(_channel(f"inputs[{name!r}]", name, value, job_mode) for name, value in inputs.items())


def _channel(field: str, name: str, value: Any, job_mode: str) -> ChannelSpec:
    if isinstance(value, FileSystemInput):
        return _file_system(field, name, value)
    item = value if isinstance(value, TrainingInput) else TrainingInput(s3_data=value)
    if not isinstance(item.s3_data, str):
        raise ValidationError(field, item.s3_data, "give the channel's URI as a string")
    groups = item.instance_groups or ()
    if isinstance(groups, str) or not all(isinstance(g, str) for g in groups):
        raise ValidationError(f"{field}.instance_groups", groups, "give a list of instance group names, "
                              "e.g. instance_groups=['data']")
    channel = build_model(
        ChannelSpec, field, name=name, uri=absolute(item.s3_data, field),
        distribution=item.distribution or "FullyReplicated", input_mode=item.input_mode or job_mode,
        content_type=item.content_type, record_wrapping=item.record_wrapping, s3_data_type=item.s3_data_type,
        compression=item.compression, attribute_names=tuple(item.attribute_names or ()),
        shuffle_seed=_seed(f"{field}.shuffle_config", item.shuffle_config), instance_groups=tuple(groups))
    _check_source(field, channel)
    return channel


def _seed(field: str, shuffle: Any) -> int | None:
    """ShuffleConfig(seed), or its job-file form {seed: N}."""
    if shuffle is None:
        return None
    seed = shuffle.seed if isinstance(shuffle, ShuffleConfig) else \
        shuffle.get("seed", shuffle.get("Seed")) if isinstance(shuffle, dict) else shuffle
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValidationError(field, shuffle, "give ShuffleConfig(seed) with an integer seed")
    return seed


def _file_system(field: str, name: str, value: FileSystemInput) -> ChannelSpec:
    if value.file_system_access_mode != "ro":
        raise ValidationError(f"{field}.file_system_access_mode", value.file_system_access_mode,
                              "a file system channel is mounted read-only here; use 'ro'")
    path = Path(str(value.directory_path)).expanduser()
    if not path.is_absolute() or not path.is_dir():
        raise ValidationError(f"{field}.directory_path", value.directory_path,
                              "no such directory; give the absolute path of the file system's directory "
                              "on this machine (a local disk or an NFS mount)")
    return build_model(ChannelSpec, field, name=name, uri=str(path.resolve()), content_type=value.content_type,
                       file_system_type=value.file_system_type, file_system_id=value.file_system_id)


def _check_source(field: str, channel: ChannelSpec) -> None:
    """What the channel names exists and is what its type says, before any instance starts."""
    if channel.s3_data_type == "S3Prefix":
        check_uri_exists(field, channel.uri)
        if channel.input_mode == "FastFile":
            _check_whole_name(field, channel.uri)
            _check_rclone(field)
            settings.fastfile_mount()   # what the instances will read: refused here, not in each of them
        return
    from shipyard.storage import manifest

    with _as_field(field, channel.uri):
        if channel.s3_data_type == "ManifestFile":
            manifest.check_objects(*manifest.read_manifest(channel.uri))
        else:
            _check_references(manifest.read_augmented(channel.uri, channel.attribute_names),
                              channel.attribute_names)


def _check_references(lines: list[dict], attribute_names: tuple[str, ...]) -> None:
    """Every object an augmented manifest's `-ref` attributes name exists: one listing per folder."""
    from shipyard.storage import manifest

    folders: dict[str, list[str]] = {}
    for line in lines:
        for name in attribute_names:
            if name.endswith("-ref"):
                folder, _, key = str(line[name]).rpartition("/")
                folders.setdefault(folder + "/", []).append(key)
    for folder, keys in folders.items():
        manifest.check_objects(folder, keys)


def _check_whole_name(field: str, uri: str) -> None:
    """SageMaker refuses a FastFile prefix that ends part-way through a name: `s3://b/train` when
    `s3://b/train-01/` exists too (a mount shows directories, not key prefixes)."""
    from shipyard.storage import uri as uris

    if uris.is_local(uri) or uri.endswith("/"):
        return
    with _as_field(field, uri):
        fs, path = uris.filesystem(uri)
        parent, _, stem = path.rstrip("/").rpartition("/")
        others = sorted(p for p in fs.ls(parent, detail=False) if p.rstrip("/").rpartition("/")[2] != stem
                        and p.rstrip("/").rpartition("/")[2].startswith(stem))
    if others:
        raise ValidationError(field, uri, f"ends part-way through a name: it also matches {others[0]!r}; end "
                              f"the prefix with '/' ({uri}/) to mount only that folder")


def _check_rclone(field: str) -> None:
    """FastFile mounts with rclone (runtime/fastfile.py): refused here rather than in every instance."""
    import shutil

    from shipyard.runtime.fastfile import INSTALL, RCLONE

    if shutil.which(RCLONE) is None:
        raise ValidationError(f"{field}.input_mode", "FastFile", f"FastFile needs rclone, which is not "
                              f"installed here; {INSTALL}, or use input_mode='File'")
