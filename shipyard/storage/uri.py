"""Turn a URI into an fsspec filesystem and a path on it, and small URI helpers.

fsspec itself is light; s3fs/botocore are imported by fsspec only when an s3:// URI is resolved."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from shipyard.errors import StorageError

if TYPE_CHECKING:
    import fsspec

LOCAL_PROTOCOLS = frozenset({"file", "local"})
ENDPOINT_ENV = ("SHIPYARD_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def _protocol(uri: str) -> str | None:
    from fsspec.core import split_protocol

    return split_protocol(uri)[0]


def s3_endpoint() -> str | None:
    """The S3 endpoint to use, most specific environment variable first."""
    return next((os.environ[k] for k in ENDPOINT_ENV if os.environ.get(k)), None)


def filesystem(uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem that handles `uri` and the path of `uri` on it (absolute for local paths)."""
    from fsspec.core import url_to_fs

    protocol = _protocol(uri)
    kwargs: dict = {}
    if protocol in ("s3", "s3a"):
        endpoint = s3_endpoint()
        if endpoint:
            kwargs["client_kwargs"] = {"endpoint_url": endpoint}
        # Other hosts and processes write under the same prefixes: never answer from a stale
        # listing. The instance itself stays cached (per endpoint): a new client costs ~1 s.
        kwargs["use_listings_cache"] = False
    try:
        fs, path = url_to_fs(uri, **kwargs)
    except ImportError as exc:
        raise StorageError(
            f"{uri}: the filesystem for {protocol}:// is not installed ({exc}); install its fsspec "
            f"package (s3:// needs s3fs)"
        ) from None
    except ValueError as exc:
        raise StorageError(
            f"{uri}: no filesystem handles the scheme {protocol!r} ({exc}); check the scheme "
            f"(s3://, file:// or a plain path) or install the fsspec package for it"
        ) from None
    return fs, path


def is_local(uri: str) -> bool:
    return _protocol(uri) in (None, *LOCAL_PROTOCOLS)


def join(uri: str, *parts: str) -> str:
    """Append path parts to a URI or path, with exactly one '/' between them."""
    parts = tuple(p.strip("/") for p in parts if p.strip("/"))
    if _protocol(uri) is None:
        return os.path.join(uri, *parts)
    if not parts:
        return uri
    return "/".join((uri.rstrip("/"), *parts))


def exists(uri: str) -> bool:
    fs, path = filesystem(uri)
    try:
        return fs.exists(path)
    except OSError as exc:
        raise StorageError(f"could not check {uri}: {exc}") from exc
