"""The AWS protocol layer under /aws: which service a request is for (its SigV4 credential scope), the
operation's input members decoded from the protocol it came in, and the output (or an AwsError) encoded
the way botocore parses that protocol. A service is a module of operations registered by its signing name;
what a service speaks is read from botocore's model of it, the one description both sides share.

    AWS JSON 1.1 / 1.0  POST /aws/, X-Amz-Target: <targetPrefix>.<Operation>, JSON both ways
    rpc-v2-cbor         POST /aws/service/<targetPrefix>/operation/<Operation>, CBOR both ways
    query               POST /aws/, form fields Action=<Operation>&Version=..., XML back

Input members reach an operation in one shape whatever the protocol: timestamps as aware datetimes, blobs
as bytes. Outputs are plain dicts; None members are dropped."""

from __future__ import annotations

import asyncio
import base64
import datetime
import functools
import json
import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl
from xml.etree import ElementTree

from fastapi import APIRouter, Request
from fastapi.responses import Response

from shipyard.registry import Registry

if TYPE_CHECKING:
    from shipyard.store import Store

ACCOUNT = "000000000000"   # the account every ARN and GetCallerIdentity names
MAX_BODY = 16 * 2**20      # read before the signature is checked, so bounded
CBOR_PATH = re.compile(r"/service/(?P<service>[^/]+)/operation/(?P<operation>[^/]+)$")

# Signing name (the credential scope's service) -> the module's OPERATIONS (dict[str, Operation]).
SERVICES = Registry("aws_services", "AWS service", {
    "sagemaker": "shipyard.server.aws.sagemaker:OPERATIONS",
    "logs": "shipyard.server.aws.logs:OPERATIONS",
    "monitoring": "shipyard.server.aws.cloudwatch:OPERATIONS",
    "sts": "shipyard.server.aws.sts:OPERATIONS",
})
# botocore names a service's model by its endpoint prefix, which differs from the signing name for these.
MODEL_NAMES = {"monitoring": "cloudwatch"}
log = logging.getLogger(__name__)


class AwsError(Exception):
    """An error as AWS returns it: its code (ValidationException, ResourceNotFound, ResourceNotFoundException,
    ResourceInUse, ResourceLimitExceeded, InvalidParameterValue, InvalidSignatureException,
    UnrecognizedClientException...), a message, the HTTP status (400 unless said)."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        self.code, self.message, self.status = code, message, status
        super().__init__(f"{code}: {message}")


@dataclass(frozen=True)
class Call:
    store: Store
    service: str       # signing name: "sagemaker", "logs", "monitoring", "sts"
    operation: str     # e.g. "DescribeLogStreams"
    access_key: str    # the key that signed the request (already verified)
    region: str        # the credential scope's region


Operation = Callable[[Call, dict], dict]


@dataclass(frozen=True)
class Incoming:
    """A request to /aws as it came: the path and query still percent-encoded, every header."""
    method: str
    path: str
    query: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str:
        return next((value for key, value in self.headers if key.lower() == name), "")


# ---- the three protocols: which one a request speaks is plain from the request itself, so even a refused
# signature is answered in the protocol the client will parse.

@dataclass(frozen=True)
class Json:
    version: str   # "1.1" or "1.0": answered as asked
    name = "json"

    def read(self, incoming: Incoming, prefix: str) -> tuple[str, object]:
        target = incoming.header("x-amz-target")
        target_prefix, _, operation = target.rpartition(".")
        if target_prefix != prefix:
            raise AwsError("UnknownOperationException", f"X-Amz-Target {target!r} is not an operation of this "
                           f"service (expected {prefix}.<Operation>)")
        return operation, _decoded(json.loads, incoming.body, "JSON")

    def response(self, status: int, content: dict, request_id: str, headers: dict | None = None) -> Response:
        return Response(json.dumps(content, default=_json_value), status,
                        {"x-amzn-RequestId": request_id, **(headers or {})},
                        media_type=f"application/x-amz-json-{self.version}")

    def encode(self, operation: str, output: dict, request_id: str, namespace: str) -> Response:
        return self.response(200, output, request_id)

    def error(self, error: AwsError, request_id: str) -> Response:
        return self.response(error.status, {"__type": error.code, "message": error.message}, request_id,
                             {"x-amzn-ErrorType": error.code})


class Cbor:
    """Smithy RPC v2 CBOR: the operation is in the path; timestamps are CBOR tag 1 (epoch seconds)."""
    name = "smithy-rpc-v2-cbor"

    def read(self, incoming: Incoming, prefix: str) -> tuple[str, object]:
        import cbor2

        named = CBOR_PATH.search(incoming.path)
        if named is None or named["service"] != prefix:
            raise AwsError("UnknownOperationException", f"{incoming.path} is not an operation of this service "
                           f"(expected .../service/{prefix}/operation/<Operation>)")
        return named["operation"], _decoded(cbor2.loads, incoming.body, "CBOR")

    def response(self, status: int, content: dict, request_id: str) -> Response:
        import cbor2

        encoded = cbor2.dumps(content, datetime_as_timestamp=True, timezone=datetime.timezone.utc)
        return Response(encoded, status, {"x-amzn-RequestId": request_id, "smithy-protocol": "rpc-v2-cbor"},
                        media_type="application/cbor")

    def encode(self, operation: str, output: dict, request_id: str, namespace: str) -> Response:
        return self.response(200, output, request_id)

    def error(self, error: AwsError, request_id: str) -> Response:
        return self.response(error.status, {"__type": error.code, "message": error.message}, request_id)


class Query:
    """The query protocol (STS): form fields in, XML out. Only flat members are read: what the STS
    operations served here take."""
    name = "query"

    def read(self, incoming: Incoming, prefix: str) -> tuple[str, object]:
        fields = _decoded(lambda body: dict(parse_qsl(body.decode(), keep_blank_values=True)), incoming.body,
                          "form-encoded")
        return fields.pop("Action", ""), {k: v for k, v in fields.items() if k != "Version"}

    def encode(self, operation: str, output: dict, request_id: str, namespace: str) -> Response:
        root = ElementTree.Element(f"{operation}Response", xmlns=namespace)
        _xml_members(ElementTree.SubElement(root, f"{operation}Result"), output)
        ElementTree.SubElement(ElementTree.SubElement(root, "ResponseMetadata"), "RequestId").text = request_id
        return self._xml(root, 200)

    def error(self, error: AwsError, request_id: str) -> Response:
        root = ElementTree.Element("ErrorResponse")
        _xml_members(ElementTree.SubElement(root, "Error"), {
            "Type": "Receiver" if error.status >= 500 else "Sender", "Code": error.code, "Message": error.message})
        ElementTree.SubElement(root, "RequestId").text = request_id
        return self._xml(root, error.status)

    @staticmethod
    def _xml(root: ElementTree.Element, status: int) -> Response:
        return Response(ElementTree.tostring(root, encoding="unicode"), status, media_type="text/xml")


def _decoded(decode: Callable[[bytes], object], body: bytes, what: str) -> object:
    if not body.strip():
        return {}
    try:
        return decode(body)
    except Exception as exc:   # each decoder has its own exceptions; all mean the same to the client
        raise AwsError("SerializationException", f"the request body is not valid {what}: {exc}") from None


Wire = Json | Cbor | Query


def wire_of(incoming: Incoming) -> Wire:
    if incoming.header("smithy-protocol") or "/operation/" in incoming.path:
        return Cbor()
    kind = incoming.header("content-type")
    if kind.startswith("application/x-www-form-urlencoded") and not incoming.header("x-amz-target"):
        return Query()
    return Json("1.0" if "x-amz-json-1.0" in kind else "1.1")


# ---- values: one shape inside, each protocol's outside.

def _utc(value: datetime.datetime) -> datetime.datetime:
    return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)


def _json_value(value: object) -> object:
    if isinstance(value, datetime.datetime):
        return _utc(value).timestamp()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not a value an AWS response holds")


def _xml_members(parent: ElementTree.Element, value: object) -> None:
    if isinstance(value, dict):
        for name, member in value.items():
            _xml_members(ElementTree.SubElement(parent, name), member)
    elif isinstance(value, list):
        for member in value:
            _xml_members(ElementTree.SubElement(parent, "member"), member)
    elif isinstance(value, datetime.datetime):
        parent.text = _utc(value).isoformat().replace("+00:00", "Z")
    elif isinstance(value, bool):
        parent.text = "true" if value else "false"
    else:
        parent.text = str(value)


def without_none(value: object) -> object:
    if isinstance(value, dict):
        return {k: without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_none(v) for v in value if v is not None]
    return value


def typed(shape, value: object, where: str = "input") -> object:
    """`value` as the model's `shape` says: timestamps (JSON's epoch seconds) as datetimes, blobs (JSON's
    base64) as bytes; a structure that is not an object is the client's SerializationException."""
    if value is None:
        return None
    kind = shape.type_name
    expected = {"structure": dict, "map": dict, "list": list}.get(kind)
    if expected is not None and not isinstance(value, expected):
        raise AwsError("SerializationException", f"{where}: expected a {kind}, got {type(value).__name__}")
    if kind == "structure":
        return {name: typed(shape.members[name], member, f"{where}.{name}") if name in shape.members else member
                for name, member in value.items()}
    if kind == "list":
        return [typed(shape.member, member, f"{where}[{i}]") for i, member in enumerate(value)]
    if kind == "map":
        return {key: typed(shape.value, member, f"{where}.{key}") for key, member in value.items()}
    if kind == "timestamp" and isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.datetime.fromtimestamp(value, datetime.timezone.utc)
    if kind == "blob" and isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except ValueError:
            raise AwsError("SerializationException", f"{where}: not base64") from None
    return value


@functools.cache
def service_model(service: str):
    import botocore.session

    return botocore.session.get_session().get_service_model(MODEL_NAMES.get(service, service))


# ---- a request, start to end.

def answer(store: Store, incoming: Incoming) -> Response:
    """The response to one request, never an exception: whatever goes wrong is an AWS error in the
    request's protocol."""
    wire, request_id = wire_of(incoming), str(uuid.uuid4())
    try:
        return _answer(store, incoming, wire, request_id)
    except AwsError as error:
        return wire.error(error, request_id)
    except Exception:
        log.exception("AWS API request %s failed", request_id)
        return wire.error(AwsError("InternalFailure", f"shipyard failed on this request ({request_id}); the "
                                   "server's log (its standard error) has the traceback", 500), request_id)


def _answer(store: Store, incoming: Incoming, wire: Wire, request_id: str) -> Response:
    from shipyard.server.aws import credentials, sigv4

    signed = sigv4.verify(incoming.method, incoming.path, incoming.query, incoming.headers, incoming.body,
                          functools.partial(credentials.secret_for, store.home))
    if signed.service not in SERVICES:
        raise AwsError("InvalidSignatureException", f"Credential should be scoped to correct service: shipyard "
                       f"serves no AWS service {signed.service!r}; it serves {', '.join(sorted(SERVICES))}", 403)
    model = service_model(signed.service)
    if wire.name not in model.metadata.get("protocols", [model.protocol]):
        raise AwsError("UnknownOperationException", f"{signed.service} does not speak the {wire.name} protocol")
    operation, params = wire.read(incoming, model.metadata.get("targetPrefix"))
    operations = SERVICES.load(signed.service)
    if operation not in operations or operation not in model.operation_names:
        raise AwsError("UnknownOperationException", f"shipyard does not serve the {signed.service} operation "
                       f"{operation!r}; it serves {', '.join(sorted(operations))}")
    input_shape = model.operation_model(operation).input_shape
    params = typed(input_shape, params) if input_shape is not None else {}
    call = Call(store, signed.service, operation, signed.access_key, signed.region)
    try:
        output = operations[operation](call, params)
    except AwsError:
        raise
    except Exception as exc:
        raise _as_aws(exc, model) or exc
    return wire.encode(operation, without_none(output), request_id, model.metadata.get("xmlNamespace", ""))


def _as_aws(exc: Exception, model) -> AwsError | None:
    """shipyard's own errors as the AWS error a client of this service expects for them."""
    from shipyard.errors import ConflictError, NotFoundError, ShipyardError

    message = str(exc)
    if isinstance(exc, NotFoundError):
        code = next((name for name in ("ResourceNotFoundException", "ResourceNotFound")
                     if name in model.shape_names), "ValidationException")
        return AwsError(code, message)
    if isinstance(exc, ConflictError):
        return AwsError("ResourceInUse", message)
    if isinstance(exc, ShipyardError):
        return AwsError("ValidationException", message)
    return None


router = APIRouter(include_in_schema=False)


@router.post("/aws")
@router.post("/aws/")
@router.post("/aws/service/{target}/operation/{operation}")
async def aws(request: Request) -> Response:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            return wire_of(_incoming(request, b"")).error(
                AwsError("RequestEntityTooLarge", f"a request body may be {MAX_BODY} bytes at most", 413),
                str(uuid.uuid4()))
    # Operations are synchronous and may read the store for a while: off the event loop.
    return await asyncio.to_thread(answer, request.app.state.settings.store, _incoming(request, bytes(body)))


def _incoming(request: Request, body: bytes) -> Incoming:
    return Incoming(request.method, request.scope.get("raw_path", b"").decode("latin-1") or request.url.path,
                    request.scope.get("query_string", b"").decode("latin-1"),
                    [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.scope["headers"]], body)
