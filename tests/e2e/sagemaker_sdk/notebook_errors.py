"""What a notebook sees when shipyard refuses: botocore's ClientError with AWS's code and message, raised
where the SDK raises it on AWS. Prints one JSON line: each case's code and message."""

import json
import sys

import boto3
import sagemaker
from botocore.exceptions import ClientError
from sagemaker.pytorch import PyTorch


def refused(call) -> dict:
    try:
        call()
    except ClientError as error:
        return {"code": error.response["Error"]["Code"], "message": error.response["Error"]["Message"]}
    raise AssertionError("not refused")


session = sagemaker.Session()
client = boto3.client("sagemaker")
if "--signature-only" in sys.argv:   # the environment's secret key is wrong
    print(json.dumps({"signature": refused(lambda: client.list_training_jobs())}))
    sys.exit()


def estimator(**arguments):
    return PyTorch(entry_point="train.py", source_dir=sys.argv[1], role="arn:aws:iam::000000000000:role/Role",
                   instance_count=1, instance_type="ml.m5.large", sagemaker_session=session, **arguments)


print(json.dumps({
    "unknown_image": refused(lambda: estimator(image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/team/"
                                                         "custom-trainer:7").fit(wait=False)),
    "missing_job": refused(lambda: client.describe_training_job(TrainingJobName="no-such-job")),
    "kms_key": refused(lambda: estimator(framework_version="2.1", py_version="py310",
                                         output_kms_key="arn:aws:kms:us-east-1:000000000000:key/k").fit(wait=False)),
    "jobs_after": client.list_training_jobs()["TrainingJobSummaries"],
}, default=str))
