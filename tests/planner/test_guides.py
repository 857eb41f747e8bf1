"""The questions SageMaker's training guides end on, asked of `shipyard plan` as a user would (the CLI,
and shipyard.plan() in Python), against the packaged catalog: each answer is the guides' answer, with
numbers, and the reason it gives is the guides' reason."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import shipyard
from shipyard.cli.main import cli


@pytest.fixture
def runner():
    return CliRunner()


def _plan(runner, *args) -> dict:
    result = runner.invoke(cli, ["plan", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_24_hours_on_one_p3_2xlarge_with_an_8_hour_deadline(runner, home):
    """'Training on a single ml.p3.2xlarge takes 24 hours; the deadline is in 8 hours': options that meet
    it, spot when cost is the aim, on demand when the deadline is hard (the exam trap)."""
    cheap = _plan(runner, "--deadline", "8h", "--baseline", "24h@ml.p3.2xlarge")
    first = cheap["options"][0]
    assert first["meets_deadline"] and first["hours"] <= 8 and first["spot"]
    assert "on spot because cost is the aim" in cheap["why"]
    assert first["cost"] == min(o["cost"] for o in cheap["options"] if o["meets_deadline"])
    # Scaling out p3.2xlarge instances over their 10 Gbps network: worse than one 8-GPU instance.
    by_name = {(o["instance_count"], o["instance_type"], o["spot"]): o for o in cheap["options"]}
    eight_small, one_large = by_name[(8, "ml.p3.2xlarge", False)], by_name[(1, "ml.p3.16xlarge", False)]
    assert one_large["hours"] < eight_small["hours"] and one_large["cost"] < eight_small["cost"]

    hard = _plan(runner, "--deadline", "8h", "--baseline", "24h@ml.p3.2xlarge", "--hard-deadline")
    first = hard["options"][0]
    assert first["meets_deadline"] and not first["spot"] and first["deadline_risk"] <= 0.01
    assert "on demand because a hard deadline cannot take spot interruptions" in hard["why"]
    none = _plan(runner, "--deadline", "8h", "--baseline", "24h@ml.p3.2xlarge", "--no-interruptions")
    assert not any(o["spot"] for o in none["options"])


def test_a_10_gb_model_with_a_10_tb_dataset(runner, home):
    """'If your model is 10GB but your dataset is 10TB, which distribution strategy?': data parallelism
    (the model fits every GPU: its replicas, at most the optimizer states sharded), with the dataset
    streamed in shards rather than copied."""
    answer = _plan(runner, "--deadline", "2d", "--baseline", "200h@ml.p4d.24xlarge", "--model-size", "10GB",
                   "--dataset-size", "10TB")
    first = answer["options"][0]
    assert first["strategy"] in ("ddp", "zero1") and first["instance_count"] > 1
    assert first["input_mode"] == "FastFile" and first["s3_data_distribution"] == "ShardedByS3Key"
    assert first["meets_deadline"]
    assert "tensor_parallel" not in first["strategy"] and "pipeline" not in first["strategy"]


def test_a_70b_model_on_80_gb_gpus_gets_a_sharded_plan_that_fits(runner, home):
    answer = _plan(runner, "--deadline", "30d", "--baseline", "2000h@ml.p5.48xlarge", "--parameters", "70e9")
    for option in answer["options"]:
        assert option["strategy"] != "ddp" and option["strategy"] != "zero1"   # 70B x 16 bytes fits nowhere whole
        if option["instance_type"] == "ml.p5.48xlarge":
            assert option["memory_per_accelerator_gb"] <= 80 * 2**30 / 1e9 * 0.9
    first = answer["options"][0]
    assert first["instance_type"] == "ml.p5.48xlarge" and first["meets_deadline"]
    assert first["distribution"]["smdistributed"]["modelparallel"]["parameters"]["hybrid_shard_degree"] == \
        first["accelerators"]
    # 70e9 parameters x 16 bytes over the data-parallel ranks, plus 2 GB of activations
    assert first["memory_per_accelerator_gb"] == pytest.approx(70e9 * 16 / first["accelerators"] / 1e9 + 2, abs=0.1)


def test_the_python_api_answers_the_same(home):
    plan = shipyard.plan(deadline="8h", baseline="24h@ml.p3.2xlarge", hard_deadline=True)
    assert not plan.options[0].spot and plan.options[0].meets_deadline
    assert plan.why.startswith(f"{plan.options[0].instance_count} x {plan.options[0].instance_type}")


def test_the_table_and_the_reason(runner, home):
    result = runner.invoke(cli, ["plan", "--deadline", "8h", "--baseline", "24h@ml.p3.2xlarge", "--top", "3"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["#", "instances", "strategy", "spot", "input", "hours", "cost", "$", "GB/acc", "risk"]
    assert [line.split()[0] for line in lines[1:lines.index("")]] == ["1", "2", "3"]
    assert lines[-1].endswith(".") and " is first: it meets the 8 h deadline" in lines[-1]


@pytest.mark.parametrize("args, message", [
    (["--deadline", "2020-01-01T00:00", "--baseline", "24h@ml.p3.2xlarge"], "deadline='2020-01-01T00:00': is in the past"),
    (["--deadline", "soon", "--baseline", "24h@ml.p3.2xlarge"], "deadline='soon': not a duration or a moment"),
    (["--deadline", "0h", "--baseline", "24h@ml.p3.2xlarge"], "deadline='0h': must be longer than zero"),
    (["--deadline", "8h", "--baseline", "24h@ml.p3.2xlarg"], "baseline='ml.p3.2xlarg': unknown name; did you mean 'ml.p3.2xlarge'"),
    (["--deadline", "8h", "--baseline", "24h"], "baseline='24h': name the instance type it was measured on, e.g. 24h@ml.p3.2xlarge"),
    (["--deadline", "8h"], "baseline: say what one instance takes for the whole training"),
    (["--deadline", "8h", "--baseline", "24h@ml.p3.2xlarge", "--budget", "5"],
     "budget=5.0: no option costs that little: the cheapest that meets the deadline is 1 x "),
    (["--deadline", "8h", "--baseline", "24h@ml.p3.2xlarge", "--parameters", "many"], "parameters='many': not a parameter count"),
    (["--deadline", "8h", "--baseline", "24h@ml.p3.2xlarge", "--dataset-size", "10 apples"], "dataset_size='10 apples': not a size"),
    (["--deadline", "8h", "--baseline", "24h@ml.p3.2xlarge", "--parameters", "7B", "--model-size", "14GB"],
     "model_size='14GB': give either parameters or model_size, not both"),
    (["--deadline", "8h", "--baseline", "24h@ml.p3.2xlarge", "--step-time", "fast"], "step_time='fast': not a duration"),
])
def test_bad_input_names_the_field_and_the_fix(runner, home, args, message):
    result = runner.invoke(cli, ["plan", *args])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert message in result.output.replace("\n", " "), result.output
