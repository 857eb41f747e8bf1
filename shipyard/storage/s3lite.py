"""S3 reads without botocore: ListObjectsV2 pages, HEAD and ranged GETs over http.client, signed with
Signature Version 4 by hashlib and hmac, asked again as botocore asks (ATTEMPTS). What an instance's agent
reads its channels with (File mode's download, FastFile's lazy files, Pipe), where the time to the script's
first batch counts and an agent is a fresh process: s3fs with aiobotocore and aiohttp take 0.2 s to import
and 0.08 s more to their first request, this module 0.02 s; and each request costs less CPU, which on 2
cores is the endpoint's too (File mode's download of 2,000 objects of 1 MiB from moto: 4.6 s, against 8.4 s
through s3fs; docs/benchmarks.md, input modes).

It serves an S3-compatible endpoint named in the environment (SHIPYARD_S3_ENDPOINT_URL, as `uri.s3_endpoint`
finds it: MinIO, Ceph, moto), with credentials in the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_SESSION_TOKEN), and no proxy; `client()` gives None otherwise, and s3fs serves: AWS itself (bucket
regions, redirects), profiles, roles and proxies are botocore's to resolve. Writes (uploads, checkpoints)
are s3fs's everywhere. A Client has the part of an fsspec file system that transfer's listings and
open_listed use, and Pipe's."""

from __future__ import annotations

import datetime
import errno
import hashlib
import hmac
import http.client
import os
import random
import ssl
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ElementTree

from shipyard import settings

PROTOCOLS = ("s3", "s3a")
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()   # the payload of every request sent here
READ_SECONDS = 60.0   # botocore's timeouts, unless SHIPYARD_S3_READ_TIMEOUT says otherwise
ATTEMPTS = 5          # botocore's (legacy retry mode) for a request without an answer, or with 429 or 5xx
BACKOFF = 0.1         # seconds before the second attempt, doubled before each next one (with jitter)
_PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


class ObjectChanged(OSError):
    """An object is no longer what its listing said (its ETag refused by If-Match: 412), as s3fs's FileExpired."""


def client(uri: str, endpoint: str | None) -> Client | None:
    """A Client for `uri`'s bucket on `endpoint` (uri.s3_endpoint's) where this module serves it (see above),
    else None."""
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    proxied = any(map(os.environ.get, _PROXIES))
    if uri.partition("://")[0] not in PROTOCOLS or not (endpoint and key and secret) or proxied:
        return None
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return Client(endpoint, region, key, secret, os.environ.get("AWS_SESSION_TOKEN"))


def signed_headers(method: str, url: urllib.parse.SplitResult, region: str, key: str, secret: str,
                   token: str | None, now: datetime.datetime) -> dict[str, str]:
    """The headers that sign `method url` (its path and query already encoded as sent) with SigV4 for S3, an
    empty payload, at `now` (UTC): host, x-amz-date, x-amz-content-sha256, x-amz-security-token with a
    token, Authorization."""
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    headers = {"host": url.netloc, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": stamp}
    if token:
        headers["x-amz-security-token"] = token
    names = sorted(headers)
    query = "&".join("=".join(pair) for pair in sorted(p.split("=", 1) for p in url.query.split("&") if p))
    canonical = "\n".join([method, url.path or "/", query, *(f"{n}:{headers[n].strip()}" for n in names), "",
                           ";".join(names), EMPTY_SHA256])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    signing = f"AWS4{secret}".encode()
    for part in (day, region, "s3", "aws4_request"):
        signing = hmac.new(signing, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(signing, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={key}/{scope}, SignedHeaders={';'.join(names)}, "
                                f"Signature={signature}")
    return headers   # host too: sent as signed (http.client would leave out a default port)


def _quote(text: str) -> str:
    """SigV4's URI encoding: everything but the unreserved characters."""
    return urllib.parse.quote(text, safe="-_.~")


class Client:
    """Path-style requests to one endpoint, a kept-alive connection per thread."""

    protocol = PROTOCOLS

    def __init__(self, endpoint: str, region: str, key: str, secret: str, token: str | None) -> None:
        self.endpoint = urllib.parse.urlsplit(endpoint)
        self.region, self._key, self._secret, self._token = region, key, secret, token
        self._local = threading.local()

    # -- the fsspec surface ---------------------------------------------------------------------------
    @staticmethod
    def split_path(path: str) -> tuple[str, str, None]:
        bucket, _, key = path.removeprefix("s3a://").removeprefix("s3://").partition("/")
        return bucket, key, None

    @staticmethod
    def unstrip_protocol(path: str) -> str:
        return "s3://" + path.removeprefix("s3a://").removeprefix("s3://")

    def call_s3(self, method: str, **request) -> dict:
        """ListObjectsV2 as botocore's client answers it (Contents: Key, Size, ETag; IsTruncated;
        NextContinuationToken), the only call transfer.pages makes."""
        if method != "list_objects_v2":
            raise NotImplementedError(method)
        query = {"list-type": "2", "encoding-type": "url", "prefix": request.get("Prefix", ""),
                 "max-keys": str(request.get("MaxKeys", 1000))}
        if request.get("ContinuationToken"):
            query["continuation-token"] = request["ContinuationToken"]
        body = self._request("GET", request["Bucket"], "", query)[2]
        root = ElementTree.fromstring(body)
        ns = root.tag[:root.tag.find("}") + 1]   # S3's namespace, or none (some compatible stores)
        contents = [{"Key": urllib.parse.unquote_plus(item.findtext(f"{ns}Key", "")),
                     "Size": int(item.findtext(f"{ns}Size", "0")), "ETag": item.findtext(f"{ns}ETag", "")}
                    for item in root.iter(f"{ns}Contents")]
        return {"Contents": contents, "IsTruncated": root.findtext(f"{ns}IsTruncated") == "true",
                "NextContinuationToken": root.findtext(f"{ns}NextContinuationToken")}

    def info(self, path: str) -> dict:
        bucket, key, _ = self.split_path(path)
        headers = self._request("HEAD", bucket, key)[1]
        return {"name": path, "type": "file", "size": int(headers.get("content-length", 0)),
                "ETag": headers.get("etag", "")}

    def isfile(self, path: str) -> bool:
        if not self.split_path(path)[1]:
            return False
        try:
            self.info(path)
        except FileNotFoundError:
            return False
        return True

    def exists(self, path: str) -> bool:
        """An object, a bucket, or a prefix with objects under it."""
        bucket, key, _ = self.split_path(path)
        try:
            if not key:
                return self._request("HEAD", bucket, "") is not None
            return self.isfile(path) or bool(self.call_s3("list_objects_v2", Bucket=bucket, MaxKeys=1,
                                                          Prefix=key.rstrip("/") + "/")["Contents"])
        except FileNotFoundError:   # no such bucket
            return False

    def open_listed(self, path: str, size: int, identity: str) -> Listed:
        return Listed(self, path, size, identity)

    def read_range(self, path: str, start: int, end: int, identity: str) -> bytes:
        """Bytes `start` to `end` of `path` (the listing's `identity`, its ETag, guards them); the body may be
        short only where the object is (transfer.read_listed says so)."""
        bucket, key, _ = self.split_path(path)
        headers = {"Range": f"bytes={start}-{end - 1}"}
        if identity:
            headers["If-Match"] = identity
        return self._request("GET", bucket, key, extra=headers)[2]

    # -- requests -------------------------------------------------------------------------------------
    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection, and whether it is new (not kept alive from an earlier request)."""
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            return connection, False
        timeout = settings.s3_read_timeout() or READ_SECONDS
        if self.endpoint.scheme == "https":
            context = ssl.create_default_context(cafile=os.environ.get("AWS_CA_BUNDLE") or _ca_bundle())
            connection = http.client.HTTPSConnection(self.endpoint.netloc, timeout=timeout, context=context)
        else:
            connection = http.client.HTTPConnection(self.endpoint.netloc, timeout=timeout)
        self._local.connection = connection
        return connection, True

    def _request(self, method: str, bucket: str, key: str, query: dict[str, str] | None = None,
                 extra: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) of a 2xx answer; FileNotFoundError for 404, ObjectChanged for 412,
        PermissionError for 403, OSError for anything else. No answer, 429 or 5xx is asked again, ATTEMPTS
        times in all (as botocore does); the callers of a stream try again for longer."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return self._send(method, bucket, key, query or {}, extra or {})
            except Unavailable:
                if attempt == ATTEMPTS:
                    raise
                time.sleep(BACKOFF * 2 ** (attempt - 1) * random.uniform(0.5, 1.0))
        raise AssertionError("unreachable")

    def _send(self, method: str, bucket: str, key: str, query: dict[str, str],
              extra: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        where = self.unstrip_protocol(f"{bucket}/{key}")
        base = self.endpoint.path.rstrip("/")
        path = f"{base}/{_quote(bucket)}" + (f"/{urllib.parse.quote(key, safe='/-_.~')}" if key else "")
        encoded = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in query.items())
        url = urllib.parse.SplitResult(self.endpoint.scheme, self.endpoint.netloc, path, encoded, "")
        headers = {**extra, **signed_headers(method, url, self.region, self._key, self._secret, self._token,
                                             datetime.datetime.now(datetime.timezone.utc))}
        while True:
            connection, new = self._connection()
            try:
                connection.request(method, path + (f"?{encoded}" if encoded else ""), headers=headers)
                response = connection.getresponse()
                body = response.read()
                break
            except (OSError, http.client.HTTPException) as exc:
                connection.close()
                self._local.connection = None
                if not new:   # the endpoint closed a kept-alive connection: a new one at once, as botocore
                    continue
                failed = OSError if isinstance(exc, ssl.SSLCertVerificationError) else Unavailable
                raise failed(errno.EIO, f"{method} {where}: {type(exc).__name__}: {exc}") from exc
        if response.will_close:
            connection.close()
            self._local.connection = None
        if 200 <= response.status < 300:
            return response.status, {k.lower(): v for k, v in response.getheaders()}, body
        code = _error_code(body) or response.reason
        if response.status == 404:
            raise FileNotFoundError(errno.ENOENT, f"{code}: {where}")
        if response.status == 412:
            raise ObjectChanged(errno.ESTALE, f"{code}: {where} changed since it was listed")
        if response.status == 403:
            raise PermissionError(errno.EACCES, f"{code}: {where}")
        failed = Unavailable if response.status == 429 or response.status >= 500 else OSError
        raise failed(errno.EIO, f"{method} {where}: HTTP {response.status} {code}")


class Unavailable(OSError):
    """The endpoint did not answer, or answered 429 or 5xx: worth asking again (a certificate it cannot
    prove is not)."""


class Listed:
    """A listed object open for reading (transfer.open_listed): each read one ranged GET, guarded by the
    listing's ETag; b"" at the listed end."""

    def __init__(self, client: Client, path: str, size: int, identity: str) -> None:
        self.client, self.path, self.size, self.identity, self.at = client, path, size, identity, 0

    def seek(self, at: int) -> int:
        self.at = at
        return at

    def read(self, count: int) -> bytes:
        end = min(self.size, self.at + count)
        if end <= self.at:
            return b""
        data = self.client.read_range(self.path, self.at, end, self.identity)
        self.at += len(data)
        return data

    def __enter__(self) -> Listed:
        return self

    def __exit__(self, *exc) -> None:
        pass


def _ca_bundle() -> str | None:
    """The certificates botocore trusts without AWS_CA_BUNDLE: certifi's where it is installed."""
    try:
        import certifi
    except ImportError:
        return None
    return certifi.where()


def _error_code(body: bytes) -> str | None:
    try:
        return ElementTree.fromstring(body).findtext("Code") if body else None
    except ElementTree.ParseError:
        return None
