"""The real SageMaker Python SDK and boto3 (their own environment, .venv-sagemaker, as a notebook has them)
against a real `shipyard server` on 127.0.0.1, S3 on moto's server. The notebooks under sagemaker_sdk/ are
written as for SageMaker: they get only the environment `shipyard server` prints (endpoints, its keys, the
region, the SDK's config file naming the default bucket). Each test checks what the SDK printed and returned
against what shipyard recorded and ran."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import urllib.request
from pathlib import Path

import pytest

from shipyard.store import Store
from tests.conftest import Server, clean_home

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SDK_PYTHON = ROOT / ".venv-sagemaker" / "bin" / "python"
NOTEBOOKS = Path(__file__).parent / "sagemaker_sdk"
SOURCE = NOTEBOOKS / "source"
if not SDK_PYTHON.exists():
    pytest.skip("no .venv-sagemaker: `make setup` makes it (the SageMaker SDK's own environment)",
                allow_module_level=True)


NOTEBOOK_ARGS = {"notebook_training.py": [str(SOURCE)], "notebook_tuning.py": [str(SOURCE)],
                 "notebook_xgboost.py": [], "notebook_errors.py": [str(SOURCE)]}


class Notebooks:
    """Every notebook started at once against one server (most of their time is the SDK's polling), each
    test waiting for its own. Each run gets only what `shipyard server` says to set (and PATH, HOME); its
    last line of output is JSON."""

    def __init__(self, home: Path, server: Server) -> None:
        self.home, self.server, self.runs, self.outputs = home, server, {}, {}
        info = json.loads(server.info_path.read_text())
        env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"),
               "SAGEMAKER_SUPPRESS_V2_WARNING": "1", **info["environment"]}
        for script, args in NOTEBOOK_ARGS.items():
            # what the notebook prints (the SDK prints the job's log lines there) apart from what it logs: a
            # file both write to could hold a line cut by the other's write
            self.outputs[script] = home.parent / f"{script}.out"
            with open(self.outputs[script], "w") as out, open(f"{self.outputs[script]}.err", "w") as err:
                self.runs[script] = subprocess.Popen([str(SDK_PYTHON), str(NOTEBOOKS / script), *args], env=env,
                                                     stdout=out, stderr=err, text=True, cwd=NOTEBOOKS)

    def result(self, script: str) -> tuple[dict, str]:
        code = self.runs[script].wait(timeout=600)
        output = self.outputs[script].read_text()
        assert code == 0, (output + Path(f"{self.outputs[script]}.err").read_text())[-6000:]
        return json.loads(output.strip().splitlines()[-1]), output

    def stop(self) -> None:
        for run in self.runs.values():
            run.kill()
            run.wait()


@pytest.fixture(scope="module")
def notebooks(tmp_path_factory, s3_server):
    """`shipyard server` over a home of the module's and moto's S3; jobs through SageMaker's API may share
    this machine's CPUs (two ml.m5.xlarge are 8 vCPUs)."""
    home = tmp_path_factory.mktemp("sagemaker-sdk") / "home"
    with pytest.MonkeyPatch.context() as patch:
        for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
            patch.delenv(name, raising=False)
        for name, value in (("SHIPYARD_HOME", str(home)), ("SHIPYARD_S3_ENDPOINT_URL", s3_server),
                            ("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                            ("AWS_DEFAULT_REGION", "us-east-1"), ("SHIPYARD_OVERSUBSCRIBE", "1")):
            patch.setenv(name, value)
        server = Server(home)
        running = Notebooks(home, server)
        yield running
        running.stop()
        server.stop()
        clean_home(home)
    # as the s3 fixture leaves moto for the next test: no buckets
    urllib.request.urlopen(urllib.request.Request(f"{s3_server}/moto-api/reset", method="POST")).close()


def downloaded(uri: str) -> tarfile.TarFile:
    import boto3

    bucket, _, key = uri.removeprefix("s3://").partition("/")
    body = boto3.client("s3", endpoint_url=os.environ["SHIPYARD_S3_ENDPOINT_URL"]).get_object(Bucket=bucket, Key=key)
    return tarfile.open(fileobj=io.BytesIO(body["Body"].read()))


def test_a_pytorch_notebook_fits_two_instances_with_logs_and_gets_its_model(notebooks):
    result, output = notebooks.result("notebook_training.py")
    name = result["job"]
    assert result["status"] == "Completed" and result["instance_count"] == 2
    # the SDK's request became the job shipyard ran: PyTorch's image, torch_distributed over both instances
    store = Store(notebooks.home)
    spec = store.get_job(name).spec
    assert (spec.framework, spec.framework_version, spec.py_version) == ("pytorch", "2.1", "py310")
    assert spec.strategy == "torch_distributed" and spec.role == "arn:aws:iam::000000000000:role/SageMakerRole"
    assert spec.source_uri.endswith(f"/{name}/source/sourcedir.tar.gz")   # the SDK's upload, fetched and unpacked
    logs = {host: store.log_path(name, host).read_text().splitlines() for host in spec.hosts}
    assert any("torch.distributed.run --nnodes 2 --nproc_per_node 1" in line for line in logs["algo-2"])
    # fit(logs=True) printed every line of both hosts' logs (CloudWatch Logs' streams), each in its order
    printed = output.splitlines()
    for host, lines in logs.items():
        # each line found after the one before it (the SDK prints the first right after its status line)
        rest = iter(printed)
        missing = next((line for line in lines if line.strip() and not any(p.endswith(line) for p in rest)), None)
        assert missing is None, f"{host}: {missing!r} not printed in its place by fit(logs=True)"
    assert "rank 0 of 2 on algo-1" in printed and "rank 1 of 2 on algo-2" in printed
    # the model where describe says, downloaded by the SDK, and the weights it learned
    assert result["model_data"] == f"s3://sagemaker-us-east-1-000000000000/{name}/output/model.tar.gz"
    assert result["members"] == ["model.pt"] and result["attached_model_data"] == result["model_data"]
    import torch

    with downloaded(result["model_data"]) as archive:
        weights = torch.load(archive.extractfile("model.pt"), weights_only=True)["weight"]
    assert torch.allclose(weights, torch.tensor([[1.5, -2.0, 0.5]]), atol=0.05)
    # TrainingJobAnalytics read the metric through CloudWatch; attach rebuilt the estimator; ListTrainingJobs
    assert result["metric_names"] == ["train:loss"] and result["metric_rows"] >= 1
    assert result["attached_entry_point"] == "train.py" and result["listed"] == [name]


def test_a_tuning_notebook_runs_random_search_and_finds_the_best_job(notebooks):
    result, _ = notebooks.result("notebook_tuning.py")
    assert (result["status"], result["strategy"]) == ("Completed", "Random")
    assert result["counters"]["Completed"] == 3 and len(result["rows"]) == 3
    best = min(result["rows"], key=lambda row: row["FinalObjectiveValue"])
    assert result["best_value"] == best["FinalObjectiveValue"] and result["attached_best"] == result["best"]
    assert result["best_model"].endswith(f"/{result['best']}/output/model.tar.gz")
    # each trial's script got the values the analytics show, within the ranges the SDK sent
    from shipyard.store.tuning import TuningStore

    store = Store(notebooks.home)
    trials = TuningStore(store).trials(result["tuning_job"])
    sent = sorted((float(store.get_job(t.job).spec.hyperparameters["lr"]),
                   int(store.get_job(t.job).spec.hyperparameters["epochs"])) for t in trials)
    assert sent == sorted((row["lr"], int(row["epochs"])) for row in result["rows"])
    assert all(0.001 <= lr <= 0.2 and 1 <= epochs <= 3 for lr, epochs in sent)
    assert TuningStore(store).get(result["tuning_job"]).spec.strategy == "Random"


def test_a_builtin_xgboost_notebook_with_a_debugger_rule(notebooks):
    result, output = notebooks.result("notebook_xgboost.py")
    assert result["status"] == "Completed"
    spec = Store(notebooks.home).get_job(result["job"]).spec
    assert spec.algorithm == "xgboost" and spec.hyperparameters["num_round"] == "30"   # as the SDK sent them
    assert "[29]#011train-rmse:" in output   # the algorithm's own lines, streamed by fit(logs=True)
    assert set(result["metrics"]) == {"train:rmse", "validation:rmse"} and result["metrics"]["validation:rmse"] < 1
    assert result["rules"] == {"LossNotDecreasing": "NoIssuesFound"}   # the built-in rule, evaluated here
    import xgboost

    with downloaded(result["model_data"]) as archive:
        booster = xgboost.Booster()
        booster.load_model(bytearray(archive.extractfile("xgboost-model").read()))
    assert booster.num_boosted_rounds() == 30


def test_errors_reach_the_sdk_as_aws_errors(notebooks):
    result, _ = notebooks.result("notebook_errors.py")
    assert result["unknown_image"]["code"] == "ValidationException"
    assert "images.yaml" in result["unknown_image"]["message"]
    assert result["missing_job"] == {"code": "ValidationException", "message": "Requested resource not found."}
    assert result["kms_key"]["code"] == "ValidationException" and "KmsKeyId" in result["kms_key"]["message"]
    # nothing was recorded for a refused request
    assert len(result["refused_jobs"]) == 2 and not set(result["refused_jobs"]) & set(result["listed"])
    assert not any(Store(notebooks.home).exists(name) for name in result["refused_jobs"])
    assert result["signature"]["code"] == "InvalidSignatureException"
