"""STS, as much of it as code pointed at shipyard asks: who am I (plain boto3 code honours
AWS_ENDPOINT_URL_STS; the sagemaker SDK is kept off STS by the config `shipyard server` writes)."""

from __future__ import annotations

from shipyard.server.aws.protocol import ACCOUNT, Call


def get_caller_identity(call: Call, params: dict) -> dict:
    return {"UserId": call.access_key, "Account": ACCOUNT, "Arn": f"arn:aws:iam::{ACCOUNT}:user/shipyard"}


OPERATIONS = {"GetCallerIdentity": get_caller_identity}
