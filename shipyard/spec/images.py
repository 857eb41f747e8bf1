"""The image catalog: what a job's `image_uri` runs here. SageMaker runs the image; shipyard runs what the
image is known to hold, declared once in the packaged `images.yaml` and extended by
`$SHIPYARD_HOME/images.yaml` (an entry of the same name there is merged over the packaged one field by
field). An image is matched by its repository and tag, whatever registry names it, so SageMaker's URI for any
region, and a mirror of it, are the same image. An image the catalog does not know is an error naming both
files.

`image_uris.retrieve` builds URIs from the same entries, so what it returns is always recognised."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from shipyard.errors import ValidationError, unknown_name_error
from shipyard.registry import Registry

CATALOG_FILE = "images.yaml"
# SageMaker's built-in algorithms shipyard runs, by the name an image's `algorithm` gives: each module has
# `validate(hyperparameters)`, `check_channels(channels)`, `metric_definitions()` and `main()`
# (shipyard/algorithms, docs there).
ALGORITHMS = Registry("algorithms", "built-in algorithm", {"xgboost": "shipyard.algorithms.xgboost"})
KINDS = ("algorithm",)
# <registry>/<repository>:<tag>; the registry part has a dot or a port (a repository path may have slashes).
URI_RE = re.compile(r"^(?:(?P<registry>[^/]+[.:][^/]*)/)?(?P<repository>[a-z0-9][a-z0-9._/-]*):(?P<tag>[\w.-]+)$")


@dataclass(frozen=True)
class Image:
    name: str
    kind: str
    repository: str
    versions: tuple[str, ...]
    algorithm: str | None = None
    registries: dict[str, str] = field(default_factory=dict)

    def uri(self, region: str, version: str) -> str:
        """The URI SageMaker's SDK builds for this image in `region` (ECR's domain there)."""
        domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
        return f"{self.registries[region]}.dkr.ecr.{region}.{domain}/{self.repository}:{version}"


def user_file() -> Path:
    from shipyard.settings import shipyard_home

    return shipyard_home() / CATALOG_FILE


def packaged_file():
    return resources.files("shipyard.spec").joinpath(CATALOG_FILE)


def catalog() -> dict[str, Image]:
    packaged = packaged_file()
    entries = _entries(packaged.read_text(encoding="utf-8"), str(packaged))
    user = user_file()
    sources = dict.fromkeys(entries, str(packaged))
    if user.is_file():
        for name, fields in _entries(user.read_text(encoding="utf-8"), str(user)).items():
            entries[name] = {**entries.get(name, {}), **fields}
            sources[name] = str(user)
    return {name: _build(name, fields, sources[name]) for name, fields in entries.items()}


@functools.lru_cache(maxsize=8)
def _parsed(text: str, source: str) -> dict:
    import yaml

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ValidationError("images file", source, f"not valid YAML: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ValidationError("images file", source, "must be a mapping of name -> fields (see the packaged "
                              f"{packaged_file()})")
    return data


def _entries(text: str, source: str) -> dict[str, dict]:
    return {name: dict(fields) for name, fields in _parsed(text, source).items()}


def _build(name: str, fields: dict, source: str) -> Image:
    known = {"kind", "algorithm", "repository", "versions", "registries"}
    extra = sorted(set(fields) - known)
    if extra:
        raise unknown_name_error(f"images entry {name!r} in {source}", extra[0], known)
    missing = sorted({"kind", "repository", "versions"} - set(fields))
    if missing:
        raise ValidationError(f"images entry {name!r}", ..., f"in {source}: needs {', '.join(missing)}")
    if fields["kind"] not in KINDS:
        raise unknown_name_error(f"images entry {name!r} in {source}: kind", str(fields["kind"]), KINDS)
    if fields["kind"] == "algorithm" and fields.get("algorithm") not in ALGORITHMS:
        raise unknown_name_error(f"images entry {name!r} in {source}: algorithm", str(fields.get("algorithm")),
                                 ALGORITHMS)
    return Image(name=name, kind=fields["kind"], repository=str(fields["repository"]),
                 versions=tuple(str(v) for v in fields["versions"]), algorithm=fields.get("algorithm"),
                 registries={str(k): str(v) for k, v in (fields.get("registries") or {}).items()})


def resolve(uri: str) -> Image:
    """The catalog's image that `uri` names; an unknown image is an error naming the files to extend."""
    match = URI_RE.match(uri) if isinstance(uri, str) else None
    if match is None:
        raise ValidationError("image_uri", uri, "not an image URI; give REGISTRY/REPOSITORY:TAG, e.g. "
                              "image_uris.retrieve('xgboost', 'us-west-2', '1.7-1')")
    repository, tag = match["repository"], match["tag"]
    for image in catalog().values():
        if repository == image.repository and tag in image.versions:
            return image
    known = ", ".join(f"{i.repository}:{{{','.join(i.versions)}}}" for i in catalog().values())
    raise ValidationError("image_uri", uri, f"not an image shipyard knows ({known}); the catalog is "
                          f"{packaged_file()}, and {user_file()} adds images of the same shape (repository, "
                          "versions, kind, algorithm)")
