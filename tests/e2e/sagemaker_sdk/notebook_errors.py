"""What a notebook sees when shipyard refuses: botocore's ClientError with AWS's code and message, raised
where the SDK raises it on AWS. Prints one JSON line: each case's code and message."""

import json
import os
import sys

import boto3
import sagemaker
from botocore.exceptions import ClientError
from sagemaker.pytorch import PyTorch


names = []   # the jobs the refused requests would have made


def refused(call) -> dict:
    try:
        call()
    except ClientError as error:
        return {"code": error.response["Error"]["Code"], "message": error.response["Error"]["Message"]}
    raise AssertionError("not refused")


def fit(estimator) -> None:
    try:
        estimator.fit(wait=False)
    finally:
        names.append(estimator._current_job_name)


session = sagemaker.Session()
client = boto3.client("sagemaker")
secret = os.environ["AWS_SECRET_ACCESS_KEY"]
# a notebook whose secret key is not the server's: a session of its own with the key one character off
wrong = sagemaker.Session(boto3.Session(aws_secret_access_key=secret[:-1] + ("x" if secret[-1] != "x" else "y"),
                                        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"]))


def estimator(**arguments):
    return PyTorch(entry_point="train.py", source_dir=sys.argv[1], role="arn:aws:iam::000000000000:role/Role",
                   instance_count=1, instance_type="ml.m5.large", sagemaker_session=session, **arguments)


print(json.dumps({
    "unknown_image": refused(lambda: fit(estimator(image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/team/"
                                                             "custom-trainer:7"))),
    "missing_job": refused(lambda: client.describe_training_job(TrainingJobName="no-such-job")),
    "kms_key": refused(lambda: fit(estimator(framework_version="2.1", py_version="py310",
                                             output_kms_key="arn:aws:kms:us-east-1:000000000000:key/k"))),
    "signature": refused(lambda: wrong.describe_training_job("any")),
    "refused_jobs": names,
    "listed": [j["TrainingJobName"] for j in client.list_training_jobs()["TrainingJobSummaries"]],
}, default=str))
