"""Checking an AWS API answer against botocore's own model of the operation's output: every member known to
the shape, every value of its type (what a real client parses; the protocol layer drops None members)."""

from __future__ import annotations

import datetime
import functools

import botocore.session

TYPES = {"string": str, "integer": int, "long": int, "double": float, "float": float, "boolean": bool, "map": dict}
# the AWS service model of each signing name (botocore names CloudWatch's by its endpoint prefix)
MODELS = {"logs": "logs", "monitoring": "cloudwatch", "sagemaker": "sagemaker", "sts": "sts"}


@functools.cache
def model(name: str):
    return botocore.session.get_session().get_service_model(name)


def dropped(value):
    if isinstance(value, dict):
        return {k: dropped(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [dropped(v) for v in value]
    return value


def conforms(value, shape, where: str) -> None:
    if shape.type_name == "structure":
        assert isinstance(value, dict), where
        assert set(value) <= set(shape.members), f"{where}: unknown members {set(value) - set(shape.members)}"
        for name, member in value.items():
            conforms(member, shape.members[name], f"{where}.{name}")
    elif shape.type_name == "list":
        assert isinstance(value, list), where
        for i, item in enumerate(value):
            conforms(item, shape.member, f"{where}[{i}]")
    elif shape.type_name == "map":
        assert isinstance(value, dict), where
        for key, item in value.items():
            conforms(item, shape.value, f"{where}[{key!r}]")
    elif shape.type_name == "timestamp":
        assert isinstance(value, datetime.datetime) and value.tzinfo is not None, where
    else:
        assert isinstance(value, TYPES[shape.type_name]), f"{where}: {value!r} is not a {shape.type_name}"
        assert shape.type_name == "boolean" or not isinstance(value, bool), where


def answered(module, service: str, operation: str, store, **params) -> dict:
    """`operation` as the protocol layer calls it, its answer (less the members the protocol drops) held to
    botocore's output shape."""
    from shipyard.server.aws.protocol import Call

    answer = dropped(module.OPERATIONS[operation](Call(store, service, operation, "AKIDTEST", "us-east-1"), params))
    conforms(answer, model(MODELS[service]).operation_model(operation).output_shape, operation)
    return answer
