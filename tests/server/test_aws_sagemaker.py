"""SageMaker's operations (shipyard/server/aws/sagemaker) called as the protocol layer calls them, over
requests exactly as the real SDK sends them (captured from sagemaker 2.257's PyTorch estimator and
HyperparameterTuner), every answer held to botocore's output shape; what a request asks that shipyard does
not do is refused by its API name before anything is recorded. The SDK itself drives them end to end in
tests/e2e/test_sagemaker_sdk.py."""

from __future__ import annotations

import copy

import pytest

from shipyard.errors import ValidationError
from shipyard.server.aws import sagemaker
from shipyard.server.aws.protocol import AwsError
from shipyard.server.aws.sagemaker import training, tuning
from shipyard.store import Store
from shipyard.store.tuning import TuningStore
from tests.server.aws_shapes import answered

NAME = "pytorch-training-2026-11-26-11-25-22-705"
BUCKET = "s3://sagemaker-us-east-1-000000000000/"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.1-cpu-py310"
HYPERPARAMETERS = {
    "epochs": "3", "lr": "0.1",
    "sagemaker_submit_directory": f'"{BUCKET}{NAME}/source/sourcedir.tar.gz"', "sagemaker_program": '"train.py"',
    "sagemaker_container_log_level": "20", "sagemaker_job_name": f'"{NAME}"', "sagemaker_region": '"us-east-1"',
    "sagemaker_torch_distributed_enabled": "true", "sagemaker_instance_type": '"ml.m5.xlarge"'}
CHANNELS = [{"DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://data/train",
                                             "S3DataDistributionType": "FullyReplicated"}}, "ChannelName": "train"}]
# CreateTrainingJob as PyTorch(..., instance_count=2, distribution={"torch_distributed": ...}).fit() sends it
TRAINING = {
    "AlgorithmSpecification": {"TrainingInputMode": "File", "TrainingImage": IMAGE,
                               "MetricDefinitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
                               "EnableSageMakerMetricsTimeSeries": True},
    "OutputDataConfig": {"S3OutputPath": BUCKET}, "TrainingJobName": NAME,
    "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
    "ResourceConfig": {"VolumeSizeInGB": 30, "InstanceCount": 2, "InstanceType": "ml.m5.xlarge"},
    "RoleArn": "arn:aws:iam::000000000000:role/x", "InputDataConfig": CHANNELS, "HyperParameters": HYPERPARAMETERS,
    "DebugHookConfig": {"S3OutputPath": BUCKET, "CollectionConfigurations": []},
    "ProfilerConfig": {"S3OutputPath": BUCKET, "DisableProfiler": False},
}
STATIC = {**{k: v for k, v in HYPERPARAMETERS.items() if k not in ("epochs", "lr")},
          "sagemaker_estimator_class_name": '"PyTorch"', "sagemaker_estimator_module": '"sagemaker.pytorch.estimator"'}
# CreateHyperParameterTuningJob as HyperparameterTuner(..., strategy="Random", max_jobs=3).fit() sends it
TUNING = {
    "HyperParameterTuningJobName": "pytorch-training-261126-1125",
    "HyperParameterTuningJobConfig": {
        "Strategy": "Random", "ResourceLimits": {"MaxNumberOfTrainingJobs": 3, "MaxParallelTrainingJobs": 2},
        "TrainingJobEarlyStoppingType": "Off", "HyperParameterTuningJobObjective": {"Type": "Minimize",
                                                                                   "MetricName": "loss"},
        "ParameterRanges": {
            "ContinuousParameterRanges": [{"Name": "lr", "MinValue": "0.01", "MaxValue": "0.2", "ScalingType": "Auto"}],
            "CategoricalParameterRanges": [],
            "IntegerParameterRanges": [{"Name": "epochs", "MinValue": "1", "MaxValue": "3", "ScalingType": "Auto"}]}},
    "TrainingJobDefinition": {
        "StaticHyperParameters": STATIC, "RoleArn": "arn:aws:iam::000000000000:role/x",
        "OutputDataConfig": {"S3OutputPath": BUCKET}, "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
        "HyperParameterTuningResourceConfig": {"InstanceCount": 2, "InstanceType": "ml.m5.xlarge",
                                               "VolumeSizeInGB": 30},
        "AlgorithmSpecification": {"TrainingInputMode": "File", "TrainingImage": IMAGE,
                                   "MetricDefinitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]},
        "InputDataConfig": CHANNELS},
}


@pytest.fixture
def store(home) -> Store:
    return Store(home)


def call(store: Store, operation: str, **params) -> dict:
    return answered(sagemaker, "sagemaker", operation, store, **params)


def recorded(store: Store, request: dict = TRAINING) -> str:
    """The job a CreateTrainingJob request makes, recorded as ended (no controller runs here)."""
    spec = training.spec_of(training.job_fields(request, request["TrainingJobName"]))
    store.create_job(spec)
    store.update_job(spec.job_name, training_start_time=1000.0, training_end_time=1600.0)
    store.transition(spec.job_name, "Completed", "Completed")
    return spec.job_name


def test_the_sdks_request_is_the_job_shipyard_runs(store):
    spec = training.spec_of(training.job_fields(TRAINING, NAME))
    assert (spec.framework, spec.framework_version, spec.py_version, spec.image_uri) == ("pytorch", "2.1", "py310",
                                                                                         IMAGE)
    assert (spec.instance_count, spec.instance_type, spec.strategy) == (2, "ml.m5.xlarge", "torch_distributed")
    assert spec.entry_point == "train.py" and spec.source_uri == f"{BUCKET}{NAME}/source/sourcedir.tar.gz"
    assert [(c.name, c.uri, c.distribution, c.input_mode) for c in spec.channels] == [
        ("train", "s3://data/train", "FullyReplicated", "File")]
    assert spec.debugger_hook_config.s3_output_path == BUCKET and spec.role == TRAINING["RoleArn"]
    # SageMaker keeps profiler data under S3OutputPath/<job>/profiler-output
    assert spec.profiler_config.output_uri(spec.output_path, NAME) == f"{BUCKET}{NAME}/profiler-output"


def test_describe_gives_back_what_was_asked_in_botocores_shape(store):
    name = recorded(store)
    described = call(store, "DescribeTrainingJob", TrainingJobName=name)
    for member in ("HyperParameters", "RoleArn", "ResourceConfig", "StoppingCondition"):
        assert described[member] == TRAINING[member], member
    # each channel as sent, with the defaults SageMaker's describe shows
    assert described["InputDataConfig"] == [{**c, "CompressionType": "None", "RecordWrapperType": "None",
                                             "InputMode": "File"} for c in CHANNELS]
    assert described["AlgorithmSpecification"] == TRAINING["AlgorithmSpecification"]
    assert described["OutputDataConfig"] == {"KmsKeyId": "", "S3OutputPath": BUCKET}   # what attach reads
    assert described["TrainingJobArn"] == f"arn:aws:sagemaker:us-east-1:000000000000:training-job/{name}"
    assert described["ModelArtifacts"]["S3ModelArtifacts"] == f"{BUCKET}{name}/output/model.tar.gz"


def test_list_filters_sorts_and_pages_as_sagemaker(store):
    names = [recorded(store, {**TRAINING, "TrainingJobName": f"job-{i}"}) for i in range(3)]
    listed = call(store, "ListTrainingJobs", MaxResults=2)
    assert [s["TrainingJobName"] for s in listed["TrainingJobSummaries"]] == names[::-1][:2]
    rest = call(store, "ListTrainingJobs", MaxResults=2, NextToken=listed["NextToken"])
    assert [s["TrainingJobName"] for s in rest["TrainingJobSummaries"]] == names[:1] and "NextToken" not in rest
    by_name = call(store, "ListTrainingJobs", SortBy="Name", SortOrder="Ascending", NameContains="job-")
    assert [s["TrainingJobName"] for s in by_name["TrainingJobSummaries"]] == names
    assert call(store, "ListTrainingJobs", StatusEquals="InProgress")["TrainingJobSummaries"] == []
    created = [store.get_job(name).creation_time for name in names]
    between = [(a + b) / 2 for a, b in zip(created, created[1:])]
    after = call(store, "ListTrainingJobs", CreationTimeAfter=_at(between[0]), SortOrder="Ascending")
    assert [s["TrainingJobName"] for s in after["TrainingJobSummaries"]] == names[1:]
    before = call(store, "ListTrainingJobs", CreationTimeBefore=_at(between[1]), LastModifiedTimeAfter=_at(0))
    assert [s["TrainingJobName"] for s in before["TrainingJobSummaries"]] == names[1::-1]


def _at(ts: float):
    import datetime

    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc)   # as the protocol hands timestamps over


def test_tags_are_added_listed_and_deleted_on_a_training_job(store):
    arn = training.ARN.format(region="us-east-1", name=recorded(store))
    call(store, "AddTags", ResourceArn=arn, Tags=[{"Key": "team", "Value": "vision"}, {"Key": "run", "Value": "1"}])
    call(store, "AddTags", ResourceArn=arn, Tags=[{"Key": "run", "Value": "2"}])
    assert call(store, "ListTags", ResourceArn=arn)["Tags"] == [{"Key": "team", "Value": "vision"},
                                                                 {"Key": "run", "Value": "2"}]
    call(store, "DeleteTags", ResourceArn=arn, TagKeys=["team"])
    assert call(store, "ListTags", ResourceArn=arn)["Tags"] == [{"Key": "run", "Value": "2"}]
    with pytest.raises(AwsError) as error:
        call(store, "ListTags", ResourceArn=arn.replace(NAME, "nope"))
    assert error.value.code == "ResourceNotFound"


def test_the_tuners_request_is_the_tuning_job_shipyard_runs_and_describes(store):
    spec = tuning.tuning_spec(TUNING)
    definition = spec.only
    assert (spec.strategy, spec.objective_type, spec.max_jobs, spec.max_parallel_jobs) == ("Random", "Minimize", 3, 2)
    assert [(r.kind, r.name, r.min_value, r.max_value) for r in definition.hyperparameter_ranges] == [
        ("continuous", "lr", 0.01, 0.2), ("integer", "epochs", 1, 3)]
    assert definition.encoding == "str"   # SageMaker hands tuned values to the script as they are
    assert definition.training.instance_count == 2 and definition.training.hyperparameters == STATIC
    TuningStore(store).create(spec)
    described = call(store, "DescribeHyperParameterTuningJob", HyperParameterTuningJobName=spec.tuning_job_name)
    job = described["TrainingJobDefinition"]
    # what HyperparameterTuner.attach reads to rebuild the estimator
    assert job["StaticHyperParameters"] == {**STATIC, "_tuning_objective_metric": "loss"}
    assert job["RoleArn"] == TUNING["TrainingJobDefinition"]["RoleArn"] and job["OutputDataConfig"]["KmsKeyId"] == ""
    assert job["AlgorithmSpecification"]["TrainingImage"] == IMAGE
    ranges = described["HyperParameterTuningJobConfig"]["ParameterRanges"]
    assert ranges["IntegerParameterRanges"][0]["Name"] == "epochs"
    listed = call(store, "ListHyperParameterTuningJobs")["HyperParameterTuningJobSummaries"]
    assert [t["HyperParameterTuningJobName"] for t in listed] == [spec.tuning_job_name]
    assert call(store, "ListTrainingJobsForHyperParameterTuningJob",
                HyperParameterTuningJobName=spec.tuning_job_name)["TrainingJobSummaries"] == []


@pytest.mark.parametrize("change, code, says", [
    (lambda r: r["OutputDataConfig"].update(KmsKeyId="arn:aws:kms:us-east-1:0:key/k"), "ValidationException",
     "OutputDataConfig.KmsKeyId"),
    (lambda r: r["AlgorithmSpecification"].update(AlgorithmName="my-algorithm", TrainingImage=None),
     "ValidationException", "AlgorithmSpecification.AlgorithmName"),
    (lambda r: r.update(RemoteDebugConfig={"EnableRemoteDebug": True}), "ValidationException", "RemoteDebugConfig"),
    (lambda r: r.update(EnableNetworkIsolation=True), "ValidationException", "EnableNetworkIsolation"),
    (lambda r: r["AlgorithmSpecification"].update(ContainerEntrypoint=["python"]), "ValidationException",
     "AlgorithmSpecification.ContainerEntrypoint"),
    (lambda r: r["ProfilerConfig"].update(ProfilingParameters={"DataloaderProfilingConfig": "{}"}),
     "ValidationException", "ProfilingParameters"),
])
def test_what_shipyard_does_not_do_is_refused_by_name_and_nothing_is_recorded(store, change, code, says):
    request = copy.deepcopy(TRAINING)
    change(request)
    with pytest.raises(AwsError) as error:
        call(store, "CreateTrainingJob", **request)
    assert error.value.code == code and says in error.value.message
    assert store.list_jobs() == []


def test_an_unknown_image_and_a_bad_value_are_shipyards_errors_naming_the_fix(store):
    request = copy.deepcopy(TRAINING)
    request["AlgorithmSpecification"]["TrainingImage"] = "123456789012.dkr.ecr.us-east-1.amazonaws.com/mine:1"
    with pytest.raises(ValidationError, match="images.yaml"):   # the protocol answers it as ValidationException
        call(store, "CreateTrainingJob", **request)
    request = copy.deepcopy(TRAINING)
    request["HyperParameters"]["-x"] = "1"
    with pytest.raises(ValidationError, match="must not start with '-'"):
        call(store, "CreateTrainingJob", **request)
    assert store.list_jobs() == []


def test_missing_and_taken_names_answer_as_sagemaker(store):
    with pytest.raises(AwsError) as error:
        call(store, "DescribeTrainingJob", TrainingJobName="nope")
    assert (error.value.code, error.value.message) == ("ValidationException", "Requested resource not found.")
    name = recorded(store)
    with pytest.raises(AwsError) as error:
        call(store, "CreateTrainingJob", **TRAINING)
    assert error.value.code == "ResourceInUse"
    with pytest.raises(AwsError) as error:
        call(store, "StopTrainingJob", TrainingJobName=name)
    assert error.value.code == "ValidationException" and "Completed" in error.value.message
    with pytest.raises(AwsError) as error:
        call(store, "DescribeHyperParameterTuningJob", HyperParameterTuningJobName="nope")
    assert error.value.code == "ResourceNotFound"
    with pytest.raises(AwsError) as error:
        call(store, "UpdateTrainingJob", TrainingJobName=name, ResourceConfig={"KeepAlivePeriodInSeconds": 60})
    assert error.value.code == "ValidationException" and "has no warm pool" in error.value.message
    with pytest.raises(ValidationError, match="profiling can only be changed while the job is in progress"):
        call(store, "UpdateTrainingJob", TrainingJobName=name, ProfilerConfig={"DisableProfiler": True})
