"""The AWS protocol layer under /aws, against real boto3 clients: SigV4 as botocore signs it (and the AWS test
suite's vectors), the keys the server issues and keeps, STS, each protocol's answers and errors as botocore
parses them (JSON 1.1, rpc-v2-cbor, query), and what `shipyard server` tells a notebook to set.

Most tests hand botocore's signed request to `protocol.answer` in this process (a `before-send` hook: no
socket, the real client on both ends of the parse); those about the server as a whole run one real
`shipyard server`."""

from __future__ import annotations

import datetime
import json
import os
import re
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from unittest import mock
from urllib.parse import urlsplit

import boto3
import pytest
import yaml
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.exceptions import ClientError

from shipyard.errors import ConflictError, NotFoundError
from shipyard.registry import Registry
from shipyard.server.aws import credentials, protocol, sigv4
from shipyard.store import Store
from tests.conftest import Server, clean_home

EXAMPLE_SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"   # the AWS SigV4 test suite's
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
S3_ENDPOINT = "http://127.0.0.1:9/"   # only named to the server: nothing talks to it
ONE_TRY = Config(retries={"total_max_attempts": 1})


def client(service: str, url: str, keys: credentials.Keys, **changes):
    return boto3.client(service, endpoint_url=f"{url}/aws", region_name="us-east-1", config=ONE_TRY,
                        **{"aws_access_key_id": keys.access_key_id, "aws_secret_access_key": keys.secret_access_key,
                           **changes})


def error_of(call) -> dict:
    with pytest.raises(ClientError) as raised:
        call()
    return {**raised.value.response["Error"], "Status": raised.value.response["ResponseMetadata"]["HTTPStatusCode"]}


# ---- in this process: botocore's request, protocol.answer, botocore's parse.

class _Body:
    def __init__(self, content: bytes) -> None:
        self.content = content

    def stream(self, **kwargs):
        yield self.content


def local_client(service: str, store: Store, keys: credentials.Keys, **changes):
    """A real boto3 client whose requests `protocol.answer` serves in this process."""
    made = client(service, "http://127.0.0.1:8765", keys, **changes)

    def send(request, **kwargs):
        parts = urlsplit(request.url)
        headers = [(k, v.decode() if isinstance(v, bytes) else v) for k, v in request.headers.items()]
        body = request.body.encode() if isinstance(request.body, str) else request.body or b""
        answered = protocol.answer(store, protocol.Incoming(request.method, parts.path, parts.query,
                                                            [("Host", parts.netloc), *headers], body))
        return AWSResponse(request.url, answered.status_code, dict(answered.headers), _Body(answered.body))

    made.meta.events.register("before-send", send)
    return made


SEEN: list[tuple[str, dict]] = []   # what the fake services below were called with


def _answering(output):
    def operation(call: protocol.Call, params: dict) -> dict:
        SEEN.append((call.operation, params))
        if isinstance(output, Exception):
            raise output
        return output
    return operation


T0 = datetime.datetime(2026, 11, 26, 12, 30, 15, 250000, tzinfo=datetime.timezone.utc)
FAKE_SAGEMAKER = {
    "DescribeTrainingJob": _answering({"TrainingJobName": "j", "TrainingJobStatus": "Completed",
                                       "CreationTime": T0, "FailureReason": None,
                                       "HyperParameters": {"lr": "0.1"}}),
    "ListTrainingJobs": _answering({"TrainingJobSummaries": []}),
    "StopTrainingJob": _answering(ConflictError("job j already ended Completed")),
    "DeleteModel": _answering(ValueError("a bug")),
}
FAKE_LOGS = {"DescribeLogStreams": _answering(NotFoundError("no job named j"))}
FAKE_CLOUDWATCH = {
    "GetMetricData": _answering({"MetricDataResults": [{"Id": "loss", "Label": None, "Timestamps": [T0],
                                                        "Values": [0.5], "StatusCode": "Complete"}]}),
    "ListMetrics": _answering(NotFoundError("no metric")),
}


@pytest.fixture
def fakes(home, monkeypatch):
    """SERVICES answered by the fakes above (and the real STS), with keys issued in the test's home."""
    monkeypatch.setattr(protocol, "SERVICES", Registry("aws_services_test", "AWS service", {
        "sagemaker": f"{__name__}:FAKE_SAGEMAKER", "logs": f"{__name__}:FAKE_LOGS",
        "monitoring": f"{__name__}:FAKE_CLOUDWATCH", "sts": "shipyard.server.aws.sts:OPERATIONS"}))
    SEEN.clear()
    return Store(home), credentials.ensure(home)


def test_json_outputs_and_inputs_keep_their_types(fakes):
    sagemaker = local_client("sagemaker", *fakes)
    described = sagemaker.describe_training_job(TrainingJobName="j")
    assert described["CreationTime"] == T0 and described["HyperParameters"] == {"lr": "0.1"}
    assert "FailureReason" not in described   # None members are left out
    assert re.fullmatch(r"[0-9a-f-]{36}", described["ResponseMetadata"]["RequestId"])
    sagemaker.list_training_jobs(CreationTimeAfter=T0, MaxResults=5)
    assert SEEN[-1] == ("ListTrainingJobs", {"CreationTimeAfter": T0, "MaxResults": 5})   # epoch seconds -> datetime


def test_cbor_outputs_and_inputs_keep_their_types(fakes):
    cloudwatch = local_client("cloudwatch", *fakes)
    query = [{"Id": "loss", "MetricStat": {"Metric": {"Namespace": "/aws/sagemaker/TrainingJobs",
                                                      "MetricName": "loss"}, "Period": 60, "Stat": "Average"}}]
    got = cloudwatch.get_metric_data(MetricDataQueries=query, StartTime=T0, EndTime=T0)
    assert got["MetricDataResults"] == [{"Id": "loss", "Timestamps": [T0], "Values": [0.5], "StatusCode": "Complete"}]
    operation, params = SEEN[-1]
    assert operation == "GetMetricData" and params["StartTime"] == T0 and params["MetricDataQueries"] == query


@pytest.mark.parametrize("service, call, code, status", [
    ("sagemaker", lambda c: c.stop_training_job(TrainingJobName="j"), "ResourceInUse", 400),
    ("sagemaker", lambda c: c.delete_model(ModelName="m"), "InternalFailure", 500),
    ("sagemaker", lambda c: c.list_models(), "UnknownOperationException", 400),
    ("logs", lambda c: c.describe_log_streams(logGroupName="g"), "ResourceNotFoundException", 400),
    ("cloudwatch", lambda c: c.list_metrics(), "ResourceNotFoundException", 400),
    ("cloudwatch", lambda c: c.list_dashboards(), "UnknownOperationException", 400),
    ("sts", lambda c: c.get_session_token(), "UnknownOperationException", 400),
])
def test_errors_are_aws_errors_in_the_requests_protocol(fakes, service, call, code, status):
    found = error_of(lambda: call(local_client(service, *fakes)))
    assert (found["Code"], found["Status"]) == (code, status)
    assert found["Message"]


def test_a_service_shipyard_does_not_serve_is_refused(fakes):
    refused = error_of(lambda: local_client("iam", *fakes).list_users())
    assert refused["Code"] == "InvalidSignatureException" and "'iam'" in refused["Message"]


def test_error_messages_reach_the_client(fakes):
    assert error_of(lambda: local_client("logs", *fakes).describe_log_streams(logGroupName="g"))["Message"] == \
        "no job named j"
    failed = error_of(lambda: local_client("sagemaker", *fakes).delete_model(ModelName="m"))
    assert "traceback" in failed["Message"] and "a bug" not in failed["Message"]   # the details stay in the log
    unknown = error_of(lambda: local_client("sagemaker", *fakes).list_models())["Message"]
    assert "ListModels" in unknown and "DescribeTrainingJob" in unknown


def test_sts_says_who_the_key_is(fakes):
    store, keys = fakes
    assert {k: v for k, v in local_client("sts", store, keys).get_caller_identity().items()
            if k != "ResponseMetadata"} == {"UserId": keys.access_key_id, "Account": protocol.ACCOUNT,
                                            "Arn": f"arn:aws:iam::{protocol.ACCOUNT}:user/shipyard"}


@pytest.mark.parametrize("service", ["sts", "logs", "cloudwatch"])
def test_signatures_are_checked_in_every_protocol(fakes, service):
    store, keys = fakes
    call = {"sts": lambda c: c.get_caller_identity(), "logs": lambda c: c.describe_log_streams(logGroupName="g"),
            "cloudwatch": lambda c: c.list_metrics()}[service]
    wrong = error_of(lambda: call(local_client(service, store, keys, aws_secret_access_key="x" * 40)))
    assert (wrong["Code"], wrong["Status"]) == ("InvalidSignatureException", 403)
    assert wrong["Message"].startswith("The request signature we calculated does not match")
    unknown = error_of(lambda: call(local_client(service, store, keys, aws_access_key_id="AKIA" + "X" * 16)))
    assert (unknown["Code"], unknown["Message"]) == ("UnrecognizedClientException",
                                                     "The security token included in the request is invalid.")


def test_new_keys_retire_the_old_ones(fakes):
    store, old = fakes
    new = credentials.ensure(store.home, renew=True)
    assert new != old and credentials.ensure(store.home) == new
    assert error_of(lambda: local_client("sts", store, old).get_caller_identity())["Code"] == \
        "UnrecognizedClientException"
    assert local_client("sts", store, new).get_caller_identity()["UserId"] == new.access_key_id


def test_the_servers_own_keys_can_be_the_pair_for_an_s3_store_with_keys(fakes, monkeypatch):
    """--aws-keys-from-env: the S3 store's keys (in the server's environment) become the API's pair, so a
    notebook signs S3 and shipyard with one; the pair the server had issued stops working."""
    from shipyard.errors import ValidationError
    from shipyard.server.serve import plan

    store, issued = fakes
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    with pytest.raises(ValidationError, match="needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        plan("127.0.0.1", 0, None, store, aws_keys_from_env=True)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "minioadmin")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "minio-secret")
    given = plan("127.0.0.1", 0, None, store, aws_keys_from_env=True).given_keys
    assert credentials.ensure(store.home, given=given) == credentials.Keys("minioadmin", "minio-secret")
    assert local_client("sts", store, given).get_caller_identity()["UserId"] == "minioadmin"
    assert error_of(lambda: local_client("sts", store, issued).get_caller_identity())["Code"] == \
        "UnrecognizedClientException"
    assert stat.S_IMODE(os.stat(credentials.path(store.home)).st_mode) == 0o600


def test_issued_keys_look_like_aws_keys_and_stay_private(home):
    keys = credentials.ensure(home)
    assert re.fullmatch(r"SY[A-Z0-9]{18}", keys.access_key_id) and len(keys.secret_access_key) == 40
    assert stat.S_IMODE(os.stat(credentials.path(home)).st_mode) == 0o600
    assert credentials.secret_for(home, keys.access_key_id) == keys.secret_access_key
    assert credentials.secret_for(home, "SY" + "0" * 18) is None


# ---- SigV4 from the specification, against the AWS test suite's published vectors.

VANILLA = {"host": ["example.amazonaws.com"], "x-amz-date": ["20150830T123600Z"]}


@pytest.mark.parametrize("method, query, signature", [
    ("GET", "", "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),   # get-vanilla
    ("GET", "Param2=value2&Param1=value1",                                            # ...-query-order-key-case
     "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"),
    ("POST", "", "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"),  # post-vanilla
])
def test_signatures_match_the_aws_test_suite(method, query, signature):
    canonical = sigv4.canonical_request(method, "/", query, VANILLA, ["host", "x-amz-date"], EMPTY_SHA256)
    assert sigv4.signature(EXAMPLE_SECRET, "20150830T123600Z", "us-east-1", "service", canonical) == signature


def test_the_canonical_request_is_the_specifications():
    assert sigv4.canonical_request("GET", "/", "", VANILLA, ["host", "x-amz-date"], EMPTY_SHA256) == (
        "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" + EMPTY_SHA256)
    assert sigv4.canonical_query("b=2&a=%7E x&a=1") == "a=1&a=~%20x&b=2"   # unreserved ~ is never encoded
    assert sigv4.canonical_path("/a//b/../c/./d%20e/") == "/a/c/d%2520e/"   # non-S3 paths are encoded twice
    spaced = {"my-header": ["  a   b  ", "c"]}
    assert "my-header:a b,c\n" in sigv4.canonical_request("GET", "/", "", spaced, ["my-header"], EMPTY_SHA256)


def vanilla_request(**headers) -> dict:
    """The get-vanilla request, signed: keyword arguments add (or with None remove) headers."""
    canonical = sigv4.canonical_request("GET", "/", "", VANILLA, ["host", "x-amz-date"], EMPTY_SHA256)
    signature = sigv4.signature(EXAMPLE_SECRET, "20150830T123600Z", "us-east-1", "service", canonical)
    signed = {"host": "example.amazonaws.com", "x-amz-date": "20150830T123600Z",
              "authorization": f"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
                               f"SignedHeaders=host;x-amz-date, Signature={signature}"}
    return {k: v for k, v in {**signed, **headers}.items() if v is not None}


def verify(headers: dict, body: bytes = b"", minutes_later: float = 0):
    now = datetime.datetime(2015, 8, 30, 12, 36, tzinfo=datetime.timezone.utc) + \
        datetime.timedelta(minutes=minutes_later)
    secrets = {"AKIDEXAMPLE": EXAMPLE_SECRET}
    return sigv4.verify("GET", "/", "", list(headers.items()), body, secrets.get, now)


def refusal(headers: dict, body: bytes = b"", minutes_later: float = 0) -> tuple[str, int, str]:
    with pytest.raises(protocol.AwsError) as refused:
        verify(headers, body, minutes_later)
    return refused.value.code, refused.value.status, refused.value.message


def test_verify_accepts_the_signed_request_and_names_its_scope():
    assert verify(vanilla_request(), minutes_later=14) == sigv4.Signed("AKIDEXAMPLE", "us-east-1", "service")
    assert verify(vanilla_request(**{"x-unsigned": "anything"})).access_key == "AKIDEXAMPLE"


def test_verify_refuses_what_aws_refuses():
    assert refusal(vanilla_request(authorization=None))[:2] == ("MissingAuthenticationTokenException", 403)
    assert refusal(vanilla_request(authorization="Bearer abc"))[0] == "IncompleteSignatureException"
    assert refusal(vanilla_request(authorization="AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/"
                                                 "service/aws4_request"))[0] == "IncompleteSignatureException"
    assert refusal(vanilla_request(host="elsewhere.example"))[:2] == ("InvalidSignatureException", 403)
    assert refusal(vanilla_request(), body=b"tampered")[0] == "InvalidSignatureException"
    code, status, message = refusal(vanilla_request(), minutes_later=16)
    assert (code, status) == ("InvalidSignatureException", 403) and message.startswith("Signature expired")
    assert refusal(vanilla_request(), minutes_later=-16)[2].startswith("Signature not yet current")


# ---- a real server.

@pytest.fixture(scope="module")
def served(tmp_path_factory):
    home = tmp_path_factory.mktemp("aws") / "home"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SHIPYARD_S3_ENDPOINT_URL", S3_ENDPOINT)
        patch.delenv("AWS_DEFAULT_REGION", raising=False)
        server = Server(home)
        try:
            yield server, credentials.read(home)
        finally:
            server.stop()
            clean_home(home)


def test_sts_answers_a_real_client_with_the_issued_keys(served):
    server, keys = served
    sts = client("sts", server.url, keys)
    assert sts.get_caller_identity()["UserId"] == keys.access_key_id
    assert error_of(lambda: client("sts", server.url, keys, aws_secret_access_key="x" * 40)
                    .get_caller_identity())["Code"] == "InvalidSignatureException"
    assert error_of(lambda: client("sts", server.url, keys, aws_access_key_id="AKIA" + "X" * 16)
                    .get_caller_identity())["Code"] == "UnrecognizedClientException"


def test_logs_and_cloudwatch_requests_reach_their_modules(served):
    server, keys = served
    logs = error_of(lambda: client("logs", server.url, keys).describe_export_tasks())   # JSON 1.1
    assert logs["Code"] == "UnknownOperationException" and "DescribeExportTasks" in logs["Message"]
    cloudwatch = error_of(lambda: client("cloudwatch", server.url, keys).list_dashboards())   # rpc-v2-cbor
    assert cloudwatch["Code"] == "UnknownOperationException" and "ListDashboards" in cloudwatch["Message"]


def test_an_unsigned_request_is_refused(served):
    server, _ = served
    request = urllib.request.Request(f"{server.url}/aws/", data=b"{}", method="POST", headers={
        "Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": "Logs_20140328.DescribeLogGroups"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 403
    assert refused.value.headers["x-amzn-ErrorType"] == "MissingAuthenticationTokenException"
    assert json.loads(refused.value.read())["__type"] == "MissingAuthenticationTokenException"


def test_a_stale_signature_is_refused(served):
    server, keys = served
    stale = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) - datetime.timedelta(minutes=20)
    with mock.patch("botocore.auth.get_current_datetime", return_value=stale):
        refused = error_of(lambda: client("sts", server.url, keys).get_caller_identity())
    assert refused["Code"] == "InvalidSignatureException" and refused["Message"].startswith("Signature expired")


def test_server_json_tells_a_notebook_what_to_set(served):
    server, keys = served
    assert stat.S_IMODE(os.stat(server.info_path).st_mode) == 0o600
    info = json.loads(server.info_path.read_text())
    assert (info["aws_access_key_id"], info["aws_secret_access_key"]) == (keys.access_key_id, keys.secret_access_key)
    config = server.info_path.with_name("sagemaker-config.yaml")
    aws = f"{server.url}/aws"
    assert info["environment"] == {
        "AWS_ENDPOINT_URL_SAGEMAKER": aws, "AWS_ENDPOINT_URL_CLOUDWATCH_LOGS": aws,
        "AWS_ENDPOINT_URL_CLOUDWATCH": aws, "AWS_ENDPOINT_URL_STS": aws, "AWS_ENDPOINT_URL_S3": S3_ENDPOINT,
        "AWS_ACCESS_KEY_ID": keys.access_key_id, "AWS_SECRET_ACCESS_KEY": keys.secret_access_key,
        "AWS_DEFAULT_REGION": "us-east-1", "SAGEMAKER_USER_CONFIG_OVERRIDE": str(config)}
    assert stat.S_IMODE(os.stat(config).st_mode) == 0o600
    assert yaml.safe_load(config.read_text()) == {"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {
        "Session": {"DefaultS3Bucket": "sagemaker-us-east-1-000000000000"}, "TelemetryOptOut": True}}}}
    assert stat.S_IMODE(os.stat(credentials.path(server.info_path.parent)).st_mode) == 0o600


def test_print_env_is_what_a_shell_evals(served):
    server, _ = served
    printed = subprocess.run([sys.executable, "-m", "shipyard.cli.main", "server", "--print-env"], check=True,
                             capture_output=True, text=True,
                             env={**os.environ, "SHIPYARD_HOME": str(server.info_path.parent)}).stdout
    evaluated = subprocess.run(["bash", "-c", f"{printed}\nenv -0"], check=True, capture_output=True,
                               text=True, env={}).stdout
    variables = dict(line.split("=", 1) for line in evaluated.split("\0") if "=" in line)
    environment = json.loads(server.info_path.read_text())["environment"]
    assert {name: variables[name] for name in environment} == environment


def test_the_keys_survive_a_restart(home, shipyard_server):
    keys = credentials.read(home)
    assert client("sts", shipyard_server.url, keys).get_caller_identity()["UserId"] == keys.access_key_id
    shipyard_server.stop()
    again = Server(home)
    try:
        assert client("sts", again.url, keys).get_caller_identity()["UserId"] == keys.access_key_id
    finally:
        again.stop()
