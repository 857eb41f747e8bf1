"""Start the server: a token for this run, `$SHIPYARD_HOME/server.json` (the address and the token, for
the user only), uvicorn on 127.0.0.1 unless told otherwise. Bound elsewhere, every request needs the
token, and the start says so.

The AWS API under /aws takes the key pair kept in $SHIPYARD_HOME (aws/credentials.py). The start prints, and
server.json keeps, the environment that points AWS code at it (boto3's per-service endpoint variables, the
keys, the region, a sagemaker SDK config naming the default bucket, so the SDK need not ask STS which
account it is)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from shipyard.server import auth
from shipyard.server.aws import credentials
from shipyard.server.aws.protocol import ACCOUNT
from shipyard.store import Store

DEFAULT_PORT = 8765
INFO_FILE = "server.json"
SDK_CONFIG_FILE = "sagemaker-config.yaml"
# botocore's AWS_ENDPOINT_URL_<service id> of each service /aws serves (S3 is the store's own endpoint).
AWS_ENDPOINTS = ("AWS_ENDPOINT_URL_SAGEMAKER", "AWS_ENDPOINT_URL_CLOUDWATCH_LOGS", "AWS_ENDPOINT_URL_CLOUDWATCH",
                 "AWS_ENDPOINT_URL_STS")
DEFAULT_REGION = "us-east-1"
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


@dataclass(frozen=True)
class ServerPlan:
    host: str
    port: int
    token: str
    info_path: Path
    region: str               # the AWS region a notebook is told to use
    default_bucket: str       # the sagemaker SDK's default_bucket()
    new_aws_keys: bool        # replace the AWS API's keys (the old ones stop working)
    given_keys: credentials.Keys | None = None   # --aws-keys-from-env: these become the API's keys

    @property
    def loopback(self) -> bool:
        return auth.is_loopback(self.host)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def sdk_config_path(self) -> Path:
        return self.info_path.with_name(SDK_CONFIG_FILE)

    def environment(self, keys: credentials.Keys) -> dict[str, str]:
        """What a notebook (or any AWS code) sets to talk to this server."""
        from shipyard.storage.uri import s3_endpoint

        s3 = s3_endpoint()
        return {**{name: f"{self.url}/aws" for name in AWS_ENDPOINTS},
                **({"AWS_ENDPOINT_URL_S3": s3} if s3 else {}),
                "AWS_ACCESS_KEY_ID": keys.access_key_id, "AWS_SECRET_ACCESS_KEY": keys.secret_access_key,
                "AWS_DEFAULT_REGION": self.region, "SAGEMAKER_USER_CONFIG_OVERRIDE": str(self.sdk_config_path)}

    def info(self, keys: credentials.Keys) -> dict:
        return {"url": self.url, "token": self.token, "pid": os.getpid(), "aws_access_key_id": keys.access_key_id,
                "aws_secret_access_key": keys.secret_access_key, "environment": self.environment(keys)}

    def sdk_config(self) -> dict:
        return {"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {
            "Session": {"DefaultS3Bucket": self.default_bucket}, "TelemetryOptOut": True}}}}


def plan(host: str, port: int, token: str | None, store: Store, default_bucket: str | None = None,
         new_aws_keys: bool = False, aws_keys_from_env: bool = False) -> ServerPlan:
    from shipyard.errors import ValidationError

    if not 0 <= port < 65536:
        raise ValidationError("--port", port, "must be 1-65535, or 0 for any free port")
    if token is not None and len(token) < 16:
        raise ValidationError("--token", "(hidden)", "must be at least 16 characters; leave it out to get a random one")
    region = os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
    if not re.fullmatch(r"[a-z0-9-]+", region):
        raise ValidationError("AWS_DEFAULT_REGION", region, "must be a region name such as us-east-1")
    bucket = default_bucket or f"sagemaker-{region}-{ACCOUNT}"   # the SDK's own naming, with our account
    if not BUCKET_NAME.fullmatch(bucket):
        raise ValidationError("--default-bucket", bucket, "must be an S3 bucket name: 3-63 lower-case letters, "
                                                          "digits, dots and hyphens")
    if new_aws_keys and aws_keys_from_env:
        raise ValidationError("--new-aws-keys", True, "cannot be combined with --aws-keys-from-env; give one")
    given = credentials.from_environment() if aws_keys_from_env else None
    return ServerPlan(host, port, token or auth.new_token(), store.home / INFO_FILE, region, bucket, new_aws_keys,
                      given)


def exports(environment: dict[str, str]) -> list[str]:
    """`export NAME=value` lines a shell can eval."""
    return [f"export {name}={shlex.quote(value)}" for name, value in environment.items()]


def warnings_for(plan: ServerPlan) -> list[str]:
    if plan.loopback:
        return []
    return [f"warning: listening on {plan.host}, reachable from other machines: every request needs the token, "
            "and traffic is not encrypted (put it behind TLS)"]


def running_environment(store: Store) -> dict[str, str]:
    """The AWS environment of the server running over `store` (its server.json)."""
    from shipyard.errors import NotFoundError

    try:
        return json.loads((store.home / INFO_FILE).read_text())["environment"]
    except (OSError, ValueError, KeyError):
        raise NotFoundError(f"no server is running over {store.home} (no {INFO_FILE} there): start "
                            "`shipyard server`") from None


def write_info(plan: ServerPlan, keys: credentials.Keys) -> None:
    """server.json and the sagemaker SDK's config, readable by the user only."""
    import yaml

    _write_private(plan.info_path, json.dumps(plan.info(keys), indent=2))
    _write_private(plan.sdk_config_path, yaml.safe_dump(plan.sdk_config(), sort_keys=False))


def _write_private(path: Path, text: str) -> None:
    """Created readable by the user only (never widened after the fact: opened with 0600), whole or not at all."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def remove_info(plan: ServerPlan) -> None:
    """On the way out, when server.json is still this run's."""
    try:
        if json.loads(plan.info_path.read_text()).get("token") == plan.token:
            plan.info_path.unlink()
    except (OSError, ValueError):
        pass


def serve(plan: ServerPlan, store: Store, say=print) -> None:
    import uvicorn

    from shipyard.server.app import create_app

    app = create_app(store, plan.token, loopback=plan.loopback)
    for warning in warnings_for(plan):
        print(warning, file=sys.stderr, flush=True)
    config = uvicorn.Config(app, host=plan.host, port=plan.port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    config.load()
    sock = config.bind_socket()   # bound before the address is announced, so it is in use already
    plan = replace(plan, port=sock.getsockname()[1])   # --port 0: the one the system gave
    keys = credentials.ensure(store.home, renew=plan.new_aws_keys, given=plan.given_keys)
    write_info(plan, keys)
    say(f"shipyard server on {plan.url}  (API docs {plan.url}/docs)")
    say(f"token: {plan.token}")
    say(f"dashboard: {plan.url}/#token={plan.token}")
    say(f"address and token in {plan.info_path}; Ctrl-C stops the server (jobs keep running)")
    say("# the AWS API (SageMaker, CloudWatch, CloudWatch Logs, STS) for a notebook or a shell; "
        "or eval \"$(shipyard server --print-env)\"")
    for line in exports(plan.environment(keys)):
        say(line)
    sys.stdout.flush()
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then raises the signal again for the handler it found:
    # this one ends the process through `finally`, so server.json goes with the server.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _exit)
    try:
        server.run(sockets=[sock])
    finally:
        remove_info(plan)


def _exit(signum, frame) -> None:
    raise SystemExit(0)
