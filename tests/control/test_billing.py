"""What a job cost, as describe() reports it: the store's attempts and times priced from the user's
instance catalog. Every expected figure is worked out by hand in the comments from the prices below,
never by calling the billing code.

Warm pools do not exist yet (keep_alive_period_in_seconds is refused), so there is no retained time
(WarmPoolStatus.ResourceRetainedBillableTimeInSeconds) to bill."""

from __future__ import annotations

import pytest

from shipyard.control.billing import billing
from shipyard.control.describe import describe_record
from shipyard.spec.catalog import get_instance_type
from shipyard.spec.job import JobSpec
from shipyard.store import Store

# 3.6 $/h is 0.001 $/s; spot is 30 % of it: 1.08 $/h, 0.0003 $/s.
CATALOG = """
ml.test.priced:
  vcpus: 2
  memory_gib: 4
  gpus: 0
  on_demand_usd_per_hour: 3.6
  spot_usd_per_hour: 1.08
ml.test.cheap:
  vcpus: 1
  memory_gib: 2
  gpus: 0
  on_demand_usd_per_hour: 0.36
  spot_usd_per_hour: 0.108
"""


@pytest.fixture
def catalog(home):
    home.mkdir(parents=True)
    (home / "instance_types.yaml").write_text(CATALOG)


@pytest.fixture
def store(home, catalog):
    return Store(home)


def _spec(spot: bool, instance_count: int = 2) -> JobSpec:
    spot_fields = {"use_spot_instances": True, "max_wait": 7200, "checkpoint_s3_uri": "file:///ckpt"} if spot else {}
    return JobSpec(job_name="billed", instance_count=instance_count, instance_type="ml.test.priced",
                   output_path="file:///out", max_run=3600, **spot_fields)


def _job(store: Store, spot: bool, start: float, end: float, attempts: list[tuple]) -> str:
    """A job of 2 instances that ran from `start` to `end`; `attempts`: (instances started, capacity found
    or None, ended, outcome), recorded as the controller records them."""
    spec = _spec(spot)
    store.create_job(spec)
    store.update_job(spec.job_name, training_start_time=start, training_end_time=end)
    for started, capacity_found, ended, outcome in attempts:
        number = store.start_attempt(spec.job_name, started)
        if capacity_found is not None:  # a Pending wait: the attempt runs from when capacity was found
            store.update_attempt(spec.job_name, number, start_time=capacity_found)
        store.update_attempt(spec.job_name, number, end_time=ended, outcome=outcome)
    return spec.job_name


def test_on_demand_job_is_billed_for_its_instances_running_time(store):
    # The instances ran 1000.0 -> 1600.0; the controller then uploaded the model until 1615.0.
    name = _job(store, spot=False, start=1000.0, end=1615.0, attempts=[(1000.0, None, 1600.0, "Completed")])
    d = describe_record(store, store.get_job(name))
    assert d["EnableManagedSpotTraining"] is False
    assert d["TrainingTimeInSeconds"] == 615
    assert d["BillableTimeInSeconds"] == 600
    # 2 instances x 600 s = 1200 instance-seconds, x 0.001 $/s = 1.2 $
    assert d["Shipyard"]["Cost"] == {"Currency": "USD", "Amount": 1.2, "OnDemandAmount": 1.2, "InstanceSeconds": 1200.0}
    assert "ManagedSpotTrainingSavings" not in d["Shipyard"]


def test_spot_job_with_an_interruption_and_a_pending_wait(store):
    name = _job(store, spot=True, start=1000.0, end=2100.7, attempts=[
        (1000.0, None, 1300.4, "Interrupted"),   # 300.4 s running, then capacity is gone until 1420.0
        (1420.0, 1480.0, 2080.2, "Completed"),   # Pending 1420.0 -> 1480.0, then 600.2 s running
    ])
    d = describe_record(store, store.get_job(name))
    assert [(a["AttemptNumber"], a["Outcome"]) for a in d["Shipyard"]["Attempts"]] == [(1, "Interrupted"), (2, "Completed")]
    assert d["TrainingTimeInSeconds"] == 1101        # 2100.7 - 1000.0 = 1100.7, waits included
    # Running: 300.4 + 600.2 = 900.6 s; at the spot/on-demand ratio 1.08 / 3.6 = 0.3: 270.18 s
    assert d["BillableTimeInSeconds"] == 270
    assert d["Shipyard"]["ManagedSpotTrainingSavings"] == 75.5   # (1 - 270.18 / 1100.7) x 100 = 75.45...
    assert d["Shipyard"]["Cost"] == {
        "Currency": "USD",
        "Amount": 0.54036,           # 2 x 900.6 s = 1801.2 instance-seconds x 0.0003 $/s
        "OnDemandAmount": 1.8012,    # 1801.2 x 0.001 $/s
        "InstanceSeconds": 1801.2,
    }


def test_a_running_spot_job_is_billed_up_to_now(catalog):
    attempts = [{"start_time": 1000.0, "end_time": 1250.0}, {"start_time": 1400.0, "end_time": None}]
    costs = billing(_spec(True, instance_count=1), 1000.0, None, attempts, get_instance_type,
                    now=1500.0)
    assert costs["TrainingTimeInSeconds"] == 500      # 1500 - 1000
    assert costs["BillableTimeInSeconds"] == 105      # (250 + 100) s x 0.3
    assert costs["ManagedSpotTrainingSavings"] == 79.0  # (1 - 105 / 500) x 100
    assert costs["Cost"]["Amount"] == 0.105           # 350 s x 0.0003 $/s


def test_a_type_gone_from_the_catalog_has_no_price_and_no_discount(store, home):
    name = _job(store, spot=True, start=1000.0, end=1400.0, attempts=[
        (1000.0, None, 1100.0, "Interrupted"), (1200.0, None, 1400.0, "Completed")])
    (home / "instance_types.yaml").write_text("")  # the user removed the type after the job ran
    d = describe_record(store, store.get_job(name))
    assert d["TrainingTimeInSeconds"] == 400
    assert d["BillableTimeInSeconds"] == 300           # 100 + 200 s, unscaled: no spot/on-demand ratio known
    assert d["Shipyard"]["ManagedSpotTrainingSavings"] == 25.0     # only the 100 s without capacity: (1 - 300 / 400) x 100
    assert d["Shipyard"]["Cost"] == {"Currency": "USD", "Amount": 0.0, "OnDemandAmount": 0.0, "InstanceSeconds": 600.0}


def test_each_instance_group_is_billed_at_its_own_price(store):
    spec = JobSpec(job_name="hetero", output_path="file:///out", max_run=3600, instance_groups=[
        {"instance_group_name": "data", "instance_type": "ml.test.cheap", "instance_count": 3},
        {"instance_group_name": "train", "instance_type": "ml.test.priced", "instance_count": 1}])
    store.create_job(spec)
    store.update_job("hetero", training_start_time=1000.0, training_end_time=1110.0)
    number = store.start_attempt("hetero", 1000.0)
    store.update_attempt("hetero", number, end_time=1100.0, outcome="Completed")
    d = describe_record(store, store.get_job("hetero"))
    # 100 s running: data 3 x 100 s x 0.0001 $/s = 0.03 $, train 1 x 100 s x 0.001 $/s = 0.1 $
    assert d["Shipyard"]["Cost"] == {"Currency": "USD", "Amount": 0.13, "OnDemandAmount": 0.13, "InstanceSeconds": 400.0,
                         "InstanceGroups": [
                             {"InstanceGroupName": "data", "InstanceType": "ml.test.cheap", "InstanceCount": 3,
                              "Amount": 0.03},
                             {"InstanceGroupName": "train", "InstanceType": "ml.test.priced", "InstanceCount": 1,
                              "Amount": 0.1}]}
    assert d["ResourceConfig"] == {"InstanceGroups": [
        {"InstanceGroupName": "data", "InstanceType": "ml.test.cheap", "InstanceCount": 3},
        {"InstanceGroupName": "train", "InstanceType": "ml.test.priced", "InstanceCount": 1}], "VolumeSizeInGB": 30}
