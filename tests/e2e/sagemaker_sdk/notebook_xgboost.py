"""SageMaker's built-in XGBoost from a notebook, unchanged: the generic Estimator with the algorithm's image
(hyperparameters as plain strings, no entry point), csv channels with their content type, and a built-in
debugger rule. Prints one JSON line at the end for the test to read."""

import json
import tempfile

import numpy as np
import sagemaker
from sagemaker import image_uris
from sagemaker.debugger import Rule, rule_configs
from sagemaker.estimator import Estimator
from sagemaker.inputs import TrainingInput

session = sagemaker.Session()
bucket = session.default_bucket()
rng = np.random.default_rng(0)
features = rng.normal(size=(600, 4))
rows = np.column_stack([features @ [1.0, 2.0, 0.0, -1.0] + rng.normal(scale=0.1, size=600), features])
with tempfile.TemporaryDirectory() as tmp:
    np.savetxt(f"{tmp}/train.csv", rows[:500], delimiter=",")
    np.savetxt(f"{tmp}/validation.csv", rows[500:], delimiter=",")
    train = session.upload_data(f"{tmp}/train.csv", bucket=bucket, key_prefix="xgboost/train")
    validation = session.upload_data(f"{tmp}/validation.csv", bucket=bucket, key_prefix="xgboost/validation")

xgb = Estimator(image_uris.retrieve("xgboost", session.boto_region_name, "1.7-1"),
                role="arn:aws:iam::000000000000:role/SageMakerRole", instance_count=1, instance_type="ml.m5.large",
                sagemaker_session=session, rules=[Rule.sagemaker(rule_configs.loss_not_decreasing())])
xgb.set_hyperparameters(objective="reg:squarederror", num_round=30, max_depth=3)
xgb.fit({"train": TrainingInput(train, content_type="text/csv"),
         "validation": TrainingInput(validation, content_type="text/csv")}, logs=True)
described = session.describe_training_job(xgb.latest_training_job.name)
print(json.dumps({
    "job": described["TrainingJobName"], "status": described["TrainingJobStatus"],
    "hyperparameters": described["HyperParameters"],
    "metrics": {m["MetricName"]: m["Value"] for m in described["FinalMetricDataList"]},
    "rules": {r["RuleConfigurationName"]: r["RuleEvaluationStatus"] for r in described["DebugRuleEvaluationStatuses"]},
    "model_data": xgb.model_data,
}))
