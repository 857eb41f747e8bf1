"""Verify AWS Signature Version 4 (the `Authorization: AWS4-HMAC-SHA256 ...` header botocore sends): the
canonical request rebuilt from exactly the headers the client signed, the string to sign over the credential
scope, the key derived from the secret we issued. Written from AWS's specification (and proven against the
published test suite and real botocore clients), not with botocore's signer, so a bug there is not
mirrored here. Refusals are the AwsErrors AWS answers with."""

from __future__ import annotations

import datetime
import hashlib
import hmac
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import quote, unquote

from shipyard.server.aws.protocol import AwsError

ALGORITHM = "AWS4-HMAC-SHA256"
DATE_FORMAT = "%Y%m%dT%H%M%SZ"
MAX_SKEW = datetime.timedelta(minutes=15)
MISMATCH = ("The request signature we calculated does not match the signature you provided. Check your AWS "
            "Secret Access Key and signing method. Consult the service documentation for details.")


@dataclass(frozen=True)
class Signed:
    """Who signed a verified request, and for what (the credential scope)."""
    access_key: str
    region: str
    service: str


def verify(method: str, path: str, query: str, headers: Iterable[tuple[str, str]], body: bytes,
           secret_for: Callable[[str], str | None], now: datetime.datetime | None = None) -> Signed:
    """The signer of a request (`path` and `query` as sent, still percent-encoded), or the AwsError AWS
    answers: no signature, a malformed one, a key we did not issue, a stale date, a signature that differs."""
    values = _header_map(headers)
    authorization = values.get("authorization")
    if not authorization:
        raise AwsError("MissingAuthenticationTokenException", "Missing Authentication Token", 403)
    algorithm, _, rest = authorization[0].partition(" ")
    if algorithm != ALGORITHM:
        raise AwsError("IncompleteSignatureException", f"Unsupported AWS 'algorithm': {algorithm!r}; "
                       f"sign requests with {ALGORITHM} (any AWS SDK does)")
    fields = dict(part.strip().partition("=")[::2] for part in rest.split(","))
    missing = [name for name in ("Credential", "SignedHeaders", "Signature") if not fields.get(name)]
    if missing:
        raise AwsError("IncompleteSignatureException",
                       " ".join(f"Authorization header requires '{name}' parameter." for name in missing))
    scope = fields["Credential"].split("/")
    if len(scope) != 5 or scope[4] != "aws4_request":
        raise AwsError("IncompleteSignatureException", "Credential must have exactly 5 slash-delimited elements, "
                       "e.g. keyid/date/region/service/aws4_request")
    access_key, day, region, service, _ = scope
    signed_headers = fields["SignedHeaders"].split(";")
    if "host" not in signed_headers:
        raise AwsError("IncompleteSignatureException", "'Host' must be a signed header")
    amz_date = (values.get("x-amz-date") or [""])[0]
    try:
        when = datetime.datetime.strptime(amz_date, DATE_FORMAT).replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        raise AwsError("IncompleteSignatureException", "Authorization header requires existence of a valid "
                       f"'X-Amz-Date' header (YYYYMMDD'T'HHMMSS'Z'); got {amz_date!r}") from None
    secret = secret_for(access_key)
    if secret is None:
        raise AwsError("UnrecognizedClientException", "The security token included in the request is invalid.", 403)
    _check_time(when, now or datetime.datetime.now(datetime.timezone.utc))
    if day != amz_date[:8]:
        raise AwsError("InvalidSignatureException", "Date in Credential scope does not match YYYYMMDD from "
                       f"ISO-8601 version of date from HTTP: {day!r} != {amz_date[:8]!r}", 403)
    computed = hashlib.sha256(body).hexdigest()
    declared = (values.get("x-amz-content-sha256") or [computed])[0]
    if declared != computed:   # the signature would cover a hash, not the body that came
        raise AwsError("InvalidSignatureException", "The provided 'x-amz-content-sha256' header does not match "
                       "the body of the request.", 403)
    canonical = canonical_request(method, path, query, values, signed_headers, declared)
    expected = signature(secret, amz_date, region, service, canonical)
    if not hmac.compare_digest(expected, fields["Signature"]):
        raise AwsError("InvalidSignatureException", MISMATCH, 403)
    return Signed(access_key, region, service)


def _header_map(headers: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for name, value in headers:
        values.setdefault(name.lower(), []).append(value)
    return values


def _check_time(when: datetime.datetime, now: datetime.datetime) -> None:
    if when < now - MAX_SKEW:
        raise AwsError("InvalidSignatureException", f"Signature expired: {_stamp(when)} is now earlier than "
                       f"{_stamp(now - MAX_SKEW)} ({_stamp(now)} - 15 min.)", 403)
    if when > now + MAX_SKEW:
        raise AwsError("InvalidSignatureException", f"Signature not yet current: {_stamp(when)} is still later "
                       f"than {_stamp(now + MAX_SKEW)} ({_stamp(now)} + 15 min.)", 403)


def _stamp(moment: datetime.datetime) -> str:
    return moment.strftime(DATE_FORMAT)


def canonical_request(method: str, path: str, query: str, headers: dict[str, list[str]],
                      signed_headers: list[str], payload_hash: str) -> str:
    """The spec's CanonicalRequest. `headers`: lower-case name -> the values as sent (a repeated header's
    values join with commas); only `signed_headers` count, so an unsigned header can change nothing."""
    lines = [f"{name}:{','.join(' '.join(v.split()) for v in headers.get(name, []))}" for name in signed_headers]
    return "\n".join([method.upper(), canonical_path(path), canonical_query(query), *lines, "",
                      ";".join(signed_headers), payload_hash])


def canonical_path(path: str) -> str:
    """Dot segments and empty segments removed (AWS signs `a//b` as `a/b`), then encoded once more: every
    service but S3 signs the path encoded twice, and the path as sent is encoded once already."""
    segments: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            segments = segments[:-1]
        elif segment not in ("", "."):
            segments.append(segment)
    trailing = "/" if segments and path.endswith("/") else ""
    return quote("/" + "/".join(segments) + trailing, safe="/~")


def canonical_query(query: str) -> str:
    pairs = [pair.partition("=")[::2] for pair in query.split("&") if pair]
    encoded = sorted((_encode(unquote(key)), _encode(unquote(value))) for key, value in pairs)
    return "&".join(f"{key}={value}" for key, value in encoded)


def _encode(text: str) -> str:
    return quote(text, safe="-_.~")


def signature(secret: str, amz_date: str, region: str, service: str, canonical: str) -> str:
    scope = f"{amz_date[:8]}/{region}/{service}/aws4_request"
    to_sign = "\n".join([ALGORITHM, amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = f"AWS4{secret}".encode()
    for part in (amz_date[:8], region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
