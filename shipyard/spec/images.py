"""The image catalog: what a job's `image_uri` runs here. SageMaker runs the image; shipyard runs what the
image is known to hold, declared once in the packaged `images.yaml` and extended by
`$SHIPYARD_HOME/images.yaml` (an entry of the same name there is merged over the packaged one field by
field). An image is matched by its repository and tag, whatever registry names it, so SageMaker's URI for any
region, and a mirror of it, are the same image. An image the catalog does not know is an error naming both
files.

`image_uris.retrieve` builds URIs from the same entries, so what it returns is always recognised. Framework
images (SageMaker's Deep Learning Containers and framework images, kind `framework`) are matched by their
repository and the shape of their tag, which names the version: what SageMaker's SDK resolves for pytorch,
tensorflow, sklearn, xgboost and huggingface is known, in any region."""

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
# algorithm: a built-in algorithm (no entry point); framework: a framework's script-mode image (an entry point).
KINDS = ("algorithm", "framework")
# The script-mode frameworks an image may run (the estimators of shipyard.sdk.frameworks, by their names).
FRAMEWORKS = ("pytorch", "tensorflow", "sklearn", "xgboost", "huggingface")
# A framework image's tag as SageMaker's SDK builds it (image_uri_config/*.json): the version, Hugging Face's
# transformers version, the processor, the Python version, then what SageMaker adds (CUDA, OS, "sagemaker"):
# pytorch-training:2.1-cpu-py310, huggingface-pytorch-training:2.0-transformers4.28-gpu-py310-cu118-ubuntu20.04.
TAG_RE = re.compile(r"^(?P<version>\d+(?:\.\d+)*(?:-\d+)?)(?:-transformers(?P<transformers>\d+(?:\.\d+)*))?"
                    r"(?:-(?P<processor>cpu|gpu))?(?:-(?P<py>py\d+))?(?:-[\w.]+)*$")
# <registry>/<repository>:<tag>; the registry part has a dot or a port (a repository path may have slashes).
URI_RE = re.compile(r"^(?:(?P<registry>[^/]+[.:][^/]*)/)?(?P<repository>[a-z0-9][a-z0-9._/-]*):(?P<tag>[\w.-]+)$")


@dataclass(frozen=True)
class Image:
    name: str
    kind: str
    repository: str
    versions: tuple[str, ...]
    algorithm: str | None = None
    # The script-mode framework it runs a job's entry point with (an algorithm image may have one too).
    framework: str | None = None
    registries: dict[str, str] = field(default_factory=dict)

    def runs(self, tag: str) -> dict[str, str | None] | None:
        """What the image at `tag` runs: its framework version and py_version, as the job records them
        (Hugging Face's framework version is the transformers version); None when it has no such tag."""
        if self.kind == "algorithm":
            return {"framework_version": tag, "py_version": None} if tag in self.versions else None
        match = TAG_RE.match(tag)
        if match is None or (self.versions and match["version"] not in self.versions):
            return None
        if self.framework == "huggingface" and not match["transformers"]:
            return None
        return {"framework_version": match["transformers"] or match["version"], "py_version": match["py"]}

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
    known = {"kind", "algorithm", "framework", "repository", "versions", "registries"}
    extra = sorted(set(fields) - known)
    if extra:
        raise unknown_name_error(f"images entry {name!r} in {source}", extra[0], known)
    needed = {"kind", "repository", "versions"} if fields.get("kind") == "algorithm" else {"kind", "repository",
                                                                                          "framework"}
    missing = sorted(needed - set(fields))
    if missing:
        raise ValidationError(f"images entry {name!r}", ..., f"in {source}: needs {', '.join(missing)}")
    if fields["kind"] not in KINDS:
        raise unknown_name_error(f"images entry {name!r} in {source}: kind", str(fields["kind"]), KINDS)
    if fields["kind"] == "algorithm" and fields.get("algorithm") not in ALGORITHMS:
        raise unknown_name_error(f"images entry {name!r} in {source}: algorithm", str(fields.get("algorithm")),
                                 ALGORITHMS)
    if fields.get("framework") is not None and fields["framework"] not in FRAMEWORKS:
        raise unknown_name_error(f"images entry {name!r} in {source}: framework", str(fields["framework"]),
                                 FRAMEWORKS)
    return Image(name=name, kind=fields["kind"], repository=str(fields["repository"]),
                 versions=tuple(str(v) for v in fields.get("versions") or ()), algorithm=fields.get("algorithm"),
                 framework=fields.get("framework"),
                 registries={str(k): str(v) for k, v in (fields.get("registries") or {}).items()})


def resolve(uri: str) -> Image:
    """The catalog's image that `uri` names; an unknown image is an error naming the files to extend."""
    match = URI_RE.match(uri) if isinstance(uri, str) else None
    if match is None:
        raise ValidationError("image_uri", uri, "not an image URI; give REGISTRY/REPOSITORY:TAG, e.g. "
                              "image_uris.retrieve('xgboost', 'us-west-2', '1.7-1')")
    repository, tag = match["repository"], match["tag"]
    for image in catalog().values():
        if repository == image.repository and image.runs(tag) is not None:
            return image
    known = ", ".join(f"{i.repository}:{{{','.join(i.versions)}}}" if i.kind == "algorithm" else
                      f"{i.repository}:<version>-<cpu|gpu>-<py>" for i in catalog().values())
    raise ValidationError("image_uri", uri, f"not an image shipyard knows ({known}); the catalog is "
                          f"{packaged_file()}, and {user_file()} adds images of the same shape (repository, "
                          "kind, framework or algorithm, versions)")


def runs(uri: str) -> tuple[Image, dict[str, str | None]]:
    """The catalog's image `uri` names, and the framework version and py_version its tag says."""
    image = resolve(uri)
    return image, image.runs(URI_RE.match(uri)["tag"])
