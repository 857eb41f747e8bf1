"""The planner's models (shipyard/planner/models.py) against numbers worked out by hand from the formulas
in docs/planner.md, and the search's own consistency: one instance of the baseline's type takes the
baseline's time, doubling the instances of a type never halves the time over a slow network."""

from __future__ import annotations

import math

import pytest

from shipyard.planner import models
from shipyard.planner.models import Strategy
from shipyard.planner.plan import plan
from shipyard.planner.request import PlanRequest, count, hours, size_bytes
from shipyard.spec.catalog import load_catalog


def test_state_bytes_follow_zero_s_table():
    # 1e9 parameters, bf16 + Adam: 2 + 2 + 12 bytes each (ZeRO's Ψ = 1e9, K = 12)
    assert models.state_bytes_per_device(1e9, Strategy("ddp"), 8, "bf16", "adam") == 16e9
    assert models.state_bytes_per_device(1e9, Strategy("zero1", shard=1), 8, "bf16", "adam") == 4e9 + 12e9 / 8
    assert models.state_bytes_per_device(1e9, Strategy("fsdp", shard=3), 8, "bf16", "adam") == 2e9
    assert models.state_bytes_per_device(1e9, Strategy("tp", tensor=8), 1, "bf16", "adam") == 2e9
    assert models.state_bytes_per_device(1e9, Strategy("ddp"), 1, "fp32", "sgd") == 12e9   # 4 + 4 + 4
    assert models.activation_bytes_per_device(2e9, Strategy("c", checkpointing=True)) == pytest.approx(0.4e9)
    assert models.activation_bytes_per_device(2e9, Strategy("o", tensor=2, offload=True)) == pytest.approx(0.1e9)


def test_communication_and_the_step():
    assert models.ring_allreduce_seconds(1e9, 4, 10e9) == pytest.approx(0.15)   # 2 x 3/4 x 1 GB / 10 GB/s
    assert models.ring_allreduce_seconds(1e9, 1, 10e9) == 0
    # 2 GB of gradients: 8 GPUs over 150 GB/s, then 2 instances over 25 Gb/s (3.125 GB/s)
    inside, across = 2 * 7 / 8 * 2e9 / 150e9, 2 * 1 / 2 * 2e9 / 3.125e9
    assert models.gradient_sync_seconds(2e9, 8, 2, 150e9, 3.125e9) == pytest.approx(inside + across)
    assert models.gradient_sync_seconds(2e9, 8, 2, 150e9, 3.125e9, volume=1.5) == pytest.approx(1.5 * (inside + across))
    assert models.step_seconds(1.0, 0.5) == 1.0                 # hidden behind the backward pass (2/3 s)
    assert models.step_seconds(1.0, 1.0) == pytest.approx(4 / 3)
    assert models.pipeline_bubble(4) == pytest.approx(3 / 19)   # (p-1)/(m+p-1), m = 4p
    assert models.default_step_seconds(1e9, 8192, 125) == pytest.approx(6e9 * 8192 / (125e12 * 0.4))


def test_deadline_risk():
    assert models.poisson_cdf(0, 1.0) == pytest.approx(math.exp(-1))
    # 6 h predicted, 8 h deadline, 10 % spread: P(Z > 2 / 0.6)
    assert models.deadline_risk(6, 8, 0.1) == pytest.approx(0.5 * math.erfc(2 / 0.6 / math.sqrt(2)))
    calm = models.deadline_risk(6, 8, 0.1, interruptions_per_hour=0.001, lost_hours_per_interruption=0.5)
    stormy = models.deadline_risk(6, 8, 0.1, interruptions_per_hour=1.0, lost_hours_per_interruption=0.5)
    assert models.deadline_risk(6, 8, 0.1) < calm < stormy and stormy > 0.7   # ~6 of 0.5 h: 9 h expected


def test_one_baseline_instance_takes_the_baseline_s_time_and_slow_networks_do_not_scale():
    request = PlanRequest(deadline_hours=100, baseline_hours=24, baseline_instance_type="ml.p3.2xlarge",
                          interruptions_ok=False)
    options = {(o.instance_count, o.instance_type): o for o in plan(request).options}
    assert options[(1, "ml.p3.2xlarge")].hours == pytest.approx(24)
    two, eight = options[(2, "ml.p3.2xlarge")], options[(8, "ml.p3.2xlarge")]
    assert two.hours > 12 and eight.hours > 3   # gradients over 10 Gb/s cost more than they save
    assert options[(1, "ml.p3.16xlarge")].hours == pytest.approx(3, rel=0.05)   # 8 GPUs on NVLink: nearly 8x


def test_a_user_s_catalog_changes_the_answer(home):
    (home).mkdir(parents=True)
    (home / "instance_types.yaml").write_text("ml.p3.16xlarge:\n  on_demand_usd_per_hour: 1.0\n")
    request = PlanRequest(deadline_hours=8, baseline_hours=24, baseline_instance_type="ml.p3.2xlarge",
                          interruptions_ok=False)
    first = plan(request, load_catalog()).options[0]
    assert (first.instance_count, first.instance_type, first.cost) == (1, "ml.p3.16xlarge", pytest.approx(3.0, rel=0.05))


@pytest.mark.parametrize("parse, text, expected", [
    (hours, "8h", 8), (hours, "90m", 1.5), (hours, "2d", 48), (hours, "3600s", 1), (hours, "1.5", 1.5),
    (size_bytes, "10TB", 10e12), (size_bytes, "512MiB", 512 * 2**20), (size_bytes, "10GB", 10e9),
    (count, "70e9", 70e9), (count, "7B", 7e9), (count, "350M", 350e6),
])
def test_people_s_units(parse, text, expected):
    assert parse("field", text) == pytest.approx(expected)


def test_the_calibrated_model():
    # 2 cores, 1 thread per instance: 2 instances run side by side, 4 share the cores two to one
    assert [models.contention(n, 1, 2) for n in (1, 2, 4)] == [1, 1, 2]
    assert models.contention(2, 2, 2) == 2
    # measured: 10 ms a step alone, 16 ms on 2 (6 ms of gradient exchange, no contention); on 4: the
    # compute twice as slow, the exchange x 2(4-1)/4 = 1.5 and x 2 for contention
    assert models.calibrated_step(1, 0.010, 0.016, 1, 2) == pytest.approx(0.010)
    assert models.calibrated_step(2, 0.010, 0.016, 1, 2) == pytest.approx(0.016)
    assert models.calibrated_step(4, 0.010, 0.016, 1, 2) == pytest.approx(0.020 + 0.006 * 1.5 * 2)
    one = {"step_seconds": 0.010, "start_seconds": 3.0, "end_seconds": 0.5}
    two = {"step_seconds": 0.016, "start_seconds": 3.5, "end_seconds": 0.7}
    # start 3 + 0.5 x 3 more instances x contention 2; 1000 steps over 4 instances; end 0.6
    assert models.calibrated_seconds(4, 1000, one, two, 1, 2) == pytest.approx(3 + 0.5 * 3 * 2 + 250 * 0.038 + 0.6)
