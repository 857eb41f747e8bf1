"""A tuning notebook, unchanged from SageMaker: HyperparameterTuner with the Random strategy over a PyTorch
estimator, its analytics, the best job, and attach. Prints one JSON line at the end for the test to read."""

import json
import os
import sys
import tempfile

import numpy as np
import sagemaker
from sagemaker import image_uris
from sagemaker.pytorch import PyTorch
from sagemaker.tuner import ContinuousParameter, HyperparameterTuner, IntegerParameter

source = sys.argv[1]
session = sagemaker.Session()
bucket = session.default_bucket()

rng = np.random.default_rng(1)
features = rng.normal(size=(200, 3))
with tempfile.TemporaryDirectory() as tmp:
    target = features @ [1.0, 2.0, 3.0] + rng.normal(scale=0.1, size=200)
    np.savetxt(os.path.join(tmp, "train.csv"), np.column_stack([target, features]), delimiter=",")
    train = session.upload_data(os.path.join(tmp, "train.csv"), bucket=bucket, key_prefix="tuning/train")

estimator = PyTorch(
    entry_point="train.py", source_dir=source, role="arn:aws:iam::000000000000:role/SageMakerRole",
    image_uri=image_uris.retrieve("pytorch", session.boto_region_name, version="2.1", py_version="py310",
                                  instance_type="ml.m5.large", image_scope="training"),
    instance_count=1, instance_type="ml.m5.large", hyperparameters={"epochs": 2}, sagemaker_session=session,
)
tuner = HyperparameterTuner(
    estimator, "train:loss", {"lr": ContinuousParameter(0.001, 0.2), "epochs": IntegerParameter(1, 3)},
    metric_definitions=[{"Name": "train:loss", "Regex": r"loss=([0-9.]+)"}], objective_type="Minimize",
    strategy="Random", max_jobs=3, max_parallel_jobs=2,
)
estimator.set_hyperparameters()   # the tuned ones are the tuner's, not static
tuner.fit({"train": train.rsplit("/", 1)[0]})
name = tuner.latest_tuning_job.name
description = tuner.describe()
frame = tuner.analytics().dataframe()
best = tuner.best_training_job()
attached = HyperparameterTuner.attach(name, sagemaker_session=session)
print(json.dumps({
    "tuning_job": name, "status": description["HyperParameterTuningJobStatus"],
    "counters": description["TrainingJobStatusCounters"],
    "strategy": description["HyperParameterTuningJobConfig"]["Strategy"],
    "best": best, "best_value": description["BestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"]["Value"],
    "rows": frame[["lr", "epochs", "FinalObjectiveValue", "TrainingJobStatus"]].to_dict("records"),
    "attached_ranges": sorted(attached.hyperparameter_ranges()), "attached_best": attached.best_training_job(),
    "best_model": attached.best_estimator().model_data,
}, default=str))
