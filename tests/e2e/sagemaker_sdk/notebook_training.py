"""A notebook's cells, unchanged from SageMaker: the SDK finds shipyard through the environment `shipyard
server` prints (endpoints, keys, region, the SDK's config file with the default bucket). Prints one JSON
line at the end for the test to read."""

import json
import os
import sys
import tarfile
import tempfile

import boto3
import numpy as np
import sagemaker
from sagemaker import image_uris
from sagemaker.pytorch import PyTorch

source = sys.argv[1]
session = sagemaker.Session()
bucket = session.default_bucket()
region = session.boto_region_name

rng = np.random.default_rng(0)
features = rng.normal(size=(400, 3))
target = features @ np.array([1.5, -2.0, 0.5]) + 0.3 + rng.normal(scale=0.05, size=400)
with tempfile.TemporaryDirectory() as tmp:
    np.savetxt(os.path.join(tmp, "train.csv"), np.column_stack([target, features]), delimiter=",")
    train = session.upload_data(os.path.join(tmp, "train.csv"), bucket=bucket, key_prefix="demo/train")
train = train.rsplit("/", 1)[0]

estimator = PyTorch(
    entry_point="train.py", source_dir=source, role="arn:aws:iam::000000000000:role/SageMakerRole",
    # torch_distributed on a CPU instance type: the SDK asks for the image itself (it checks instance types
    # only when it resolves the image)
    image_uri=image_uris.retrieve("pytorch", region, version="2.1", py_version="py310",
                                  instance_type="ml.m5.xlarge", image_scope="training"),
    instance_count=2, instance_type="ml.m5.xlarge", distribution={"torch_distributed": {"enabled": True}},
    hyperparameters={"epochs": 3, "lr": 0.1}, sagemaker_session=session, base_job_name="sdk-ddp",
    metric_definitions=[{"Name": "train:loss", "Regex": r"loss=([0-9.]+)"}],
)
estimator.fit({"train": train}, logs=True)
name = estimator.latest_training_job.name
description = session.describe_training_job(name)

with tempfile.TemporaryDirectory() as tmp:
    sagemaker.s3.S3Downloader.download(estimator.model_data, tmp, sagemaker_session=session)
    with tarfile.open(os.path.join(tmp, "model.tar.gz")) as archive:
        members = archive.getnames()

metrics = estimator.training_job_analytics.dataframe()   # every metric the job defines, from CloudWatch
attached = PyTorch.attach(name, sagemaker_session=session)
listed = [j["TrainingJobName"] for j in boto3.client("sagemaker").list_training_jobs(
    NameContains="sdk-ddp")["TrainingJobSummaries"]]
print(json.dumps({
    "job": name, "status": description["TrainingJobStatus"], "model_data": estimator.model_data,
    "members": members, "hyperparameters": description["HyperParameters"],
    "instance_count": description["ResourceConfig"]["InstanceCount"],
    "metric_rows": len(metrics), "metric_names": sorted(set(metrics["metric_name"])) if len(metrics) else [],
    "attached_model_data": attached.model_data, "attached_entry_point": attached.entry_point,
    "listed": listed,
}))
