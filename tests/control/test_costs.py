"""`shipyard costs`: jobs recorded in the store as their controllers leave them, priced from the user's
catalog, added up by day, by job-name prefix and by tag. Every expected figure is worked out by hand
from the prices below (3.6 USD/h on demand is 0.001 USD/s; spot 30 % of it)."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from shipyard.cli.main import cli
from shipyard.control.costs import job_costs, prefix_of, totals
from shipyard.spec.job import JobSpec
from shipyard.store import Store

CATALOG = """
ml.test.priced:
  vcpus: 1
  memory_gib: 1
  gpus: 0
  on_demand_usd_per_hour: 3.6
  spot_usd_per_hour: 1.08
"""
DAY = 86400


@pytest.fixture
def store(home):
    home.mkdir(parents=True)
    (home / "instance_types.yaml").write_text(CATALOG)
    return Store(home)


def _ran(store, name: str, seconds: float, created: float, spot: bool = False, tags=()) -> None:
    extra = {"use_spot_instances": True, "max_run": 3600, "max_wait": 7200, "spot_without_checkpoints": True} if spot else {}
    store.create_job(JobSpec(job_name=name, instance_type="ml.test.priced", output_path="file:///out",
                             tags=[{"Key": k, "Value": v} for k, v in tags], **extra))
    with store._tx() as db:
        db.execute("UPDATE jobs SET creation_time=? WHERE name=?", (created, name))
    store.update_job(name, training_start_time=created, training_end_time=created + seconds)
    number = store.start_attempt(name, created)
    store.update_attempt(name, number, end_time=created + seconds, outcome="Completed")
    store.transition(name, "Completed", "Completed")


@pytest.fixture
def jobs(store):
    today = time.mktime(time.strptime("2026-11-20 12:00", "%Y-%m-%d %H:%M"))
    _ran(store, "bert-2026-11-20-12-00-00-000", 1000, today, tags=[("team", "nlp")])            # $1.00
    _ran(store, "bert-2026-11-20-13-00-00-000", 500, today + 3600, spot=True, tags=[("team", "nlp")])  # $0.15, saves $0.35
    _ran(store, "hpo-001-0a1b2c3d", 2000, today - DAY, tags=[("team", "vision"), ("cost-center", "7")])  # $2.00
    _ran(store, "hpo-002-4e5f6a7b", 3000, today - DAY)                                          # $3.00
    return today


def test_by_day_prefix_and_tag(store, jobs):
    found = job_costs(store)
    assert len(found) == 4
    by_day = totals(found, "day")
    assert [(r["day"], r["jobs"], r["cost"]) for r in by_day] == [
        ("2026-11-20", 2, pytest.approx(1.15)), ("2026-11-19", 2, pytest.approx(5.0)), ("total", 4, pytest.approx(6.15))]
    assert by_day[0]["spot_savings"] == pytest.approx(0.35) and by_day[0]["on_demand"] == pytest.approx(1.5)
    by_prefix = totals(found, "prefix")
    assert [(r["prefix"], r["jobs"], r["cost"]) for r in by_prefix] == [
        ("hpo", 2, pytest.approx(5.0)), ("bert", 2, pytest.approx(1.15)), ("total", 4, pytest.approx(6.15))]
    by_tag = totals(found, "tag")   # a job with two tags counts under each; the total counts it once
    assert [(r["tag"], r["jobs"], r["cost"]) for r in by_tag] == [
        ("(no tag)", 1, pytest.approx(3.0)), ("cost-center=7", 1, pytest.approx(2.0)),
        ("team=vision", 1, pytest.approx(2.0)), ("team=nlp", 2, pytest.approx(1.15)), ("total", 4, pytest.approx(6.15))]


def test_the_command(store, jobs):
    runner = CliRunner()
    result = runner.invoke(cli, ["costs", "--by", "prefix"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["prefix", "jobs", "cost", "$", "on", "demand", "$", "spot", "savings", "$", "warm",
                                "pools", "$"]
    assert lines[-1].split() == ["total", "4", "6.15", "6.50", "0.35", "0.00"]
    since = runner.invoke(cli, ["costs", "--since", "2026-11-20", "--json"])
    assert json.loads(since.output)["rows"][-1]["jobs"] == 2
    bad = runner.invoke(cli, ["costs", "--since", "yesterday"])
    assert bad.exit_code == 2 and "since='yesterday': not a duration or a moment" in bad.output


def test_prefixes():
    assert prefix_of("bert-2026-11-20-12-00-00-000") == "bert"
    assert prefix_of("hpo-2026-11-20-12-00-00-000-003-0a1b2c3d") == "hpo"   # a trial of a generated tuning name
    assert prefix_of("my-job") == "my-job"
