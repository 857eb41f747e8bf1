"""Heterogeneous clusters (issue 18) without running anything: what every host would run and see, planned
from the estimator, the job file and the CLI; the SDK's own refusals. The bad inputs shared with the CLI
are in tests/cli/test_bad_inputs.py; a real job in tests/e2e/test_heterogeneous.py."""

from __future__ import annotations

import json

import pytest

from shipyard.cli.main import cli
from shipyard.errors import ValidationError
from shipyard.inputs import TrainingInput
from shipyard.instance_group import InstanceGroup
from shipyard.pytorch import PyTorch

GROUPS = [InstanceGroup("data", "local", 1), InstanceGroup("train", "local", 2)]


def _estimator(script, **kwargs):
    kwargs.setdefault("distribution", {"torch_distributed": {"enabled": True}, "instance_groups": [GROUPS[1]]})
    return PyTorch(entry_point="train.py", source_dir=str(script), instance_groups=GROUPS, **kwargs)


def test_only_the_distribution_group_runs_the_launcher(home, script, tmp_path):
    (tmp_path / "labels").mkdir()
    launches = _estimator(script).plan({"labels": TrainingInput(str(tmp_path / "labels"), instance_groups=["train"]),
                                        "all": str(tmp_path / "labels")})
    by_host = {launch.instance.host: launch for launch in launches}
    assert {h: launch.launcher for h, launch in by_host.items()} == {
        "algo-1": "single", "algo-2": "torch_distributed", "algo-3": "torch_distributed"}
    for rank, host in enumerate(("algo-2", "algo-3")):
        argv = by_host[host].argv
        assert argv[argv.index("--nnodes") + 1] == "2" and argv[argv.index("--node_rank") + 1] == str(rank)
        assert argv[argv.index("--master_addr") + 1] == "algo-2"       # the distribution group's first host
    groups = {"data": {"hosts": ["algo-1"], "instance_group_name": "data", "instance_type": "local"},
              "train": {"hosts": ["algo-2", "algo-3"], "instance_group_name": "train", "instance_type": "local"}}
    for host, group in (("algo-1", "data"), ("algo-2", "train"), ("algo-3", "train")):
        env = by_host[host].env
        assert env["SM_CURRENT_INSTANCE_GROUP"] == group and env["SM_IS_HETERO"] == "true"
        assert json.loads(env["SM_CURRENT_INSTANCE_GROUP_HOSTS"]) == groups[group]["hosts"]
        assert json.loads(env["SM_INSTANCE_GROUPS"]) == ["data", "train"]
        assert json.loads(env["SM_INSTANCE_GROUPS_DICT"]) == groups
        assert json.loads(env["SM_DISTRIBUTION_INSTANCE_GROUPS"]) == ["train"]
        assert json.loads(env["SM_HOSTS"]) == ["algo-1", "algo-2", "algo-3"]
        training_env = json.loads(env["SM_TRAINING_ENV"])
        assert training_env["distribution_hosts"] == ["algo-2", "algo-3"]
        assert training_env["is_master"] == (host == "algo-2")
        channels = sorted(c.name for c in by_host[host].instance.config.channels)
        assert channels == (["all"] if group == "data" else ["all", "labels"])
        assert sorted(json.loads(env["SM_CHANNELS"])) == channels


def test_one_group_runs_the_distribution_without_naming_it(home, script):
    estimator = PyTorch(entry_point="train.py", source_dir=str(script), instance_groups=[GROUPS[1]],
                        distribution={"torch_distributed": {"enabled": True}})
    launches = estimator.plan()
    assert [launch.launcher for launch in launches] == ["torch_distributed"] * 2
    assert json.loads(launches[0].env["SM_DISTRIBUTION_INSTANCE_GROUPS"]) == ["train"]
    assert launches[0].env["SM_IS_HETERO"] == "false"


def test_a_job_without_groups_is_one_homogeneous_group(home, script):
    (launch,) = PyTorch(entry_point="train.py", source_dir=str(script)).plan()
    assert launch.env["SM_CURRENT_INSTANCE_GROUP"] == "homogeneousCluster" and launch.env["SM_IS_HETERO"] == "false"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"instance_count": 3}, r"instance_count=3: cannot be combined with instance_groups"),
    ({"instance_groups": ["data"]}, r"instance_groups\[0\]='data': give InstanceGroup\(instance_group_name"),
    ({"instance_groups": [InstanceGroup("data", "local", 0)]}, r"instance_groups\[0\].instance_count=0"),
    ({"instance_groups": [InstanceGroup(None, "local", 1)]}, r"instance_groups\[0\].instance_group_name=None"),
    ({"distribution": {"mpi": {"enabled": True}, "instance_groups": ["data", "train"]}},
     r"distribution.instance_groups=\['data', 'train'\]: the distribution runs on exactly one"),
])
def test_refused_when_the_estimator_is_made(script, kwargs, message):
    arguments = {"entry_point": "train.py", "source_dir": str(script), "instance_groups": GROUPS, **kwargs}
    with pytest.raises(ValidationError, match=message):
        PyTorch(**arguments)


def test_a_channels_groups_are_names(home, script, tmp_path):
    with pytest.raises(ValidationError, match=r"inputs\['train'\].instance_groups='train': give a list of instance"):
        _estimator(script).plan({"train": TrainingInput(str(tmp_path), instance_groups="train")})


def test_cli_and_job_file_plan_the_same_groups(home, script, monkeypatch):
    from click.testing import CliRunner

    runner = CliRunner()
    monkeypatch.chdir(script)
    flags = runner.invoke(cli, ["run", "train.py", "--instance-group", "data=local:1", "--instance-group",
                                "train=local:2", "--distribution", "torch_distributed", "--distribution-group", "train",
                                "--dry-run", "--json"])
    assert flags.exit_code == 0, flags.output
    (script / "job.yaml").write_text(
        "entry_point: train.py\ninstance_groups:\n"
        "  - {instance_group_name: data, instance_type: local, instance_count: 1}\n"
        "  - {instance_group_name: train, instance_type: local, instance_count: 2}\n"
        "distribution:\n  torch_distributed: {enabled: true}\n  instance_groups: [train]\n")
    from_file = runner.invoke(cli, ["run", "job.yaml", "--dry-run", "--json"])
    assert from_file.exit_code == 0, from_file.output
    for result in (flags, from_file):
        plan = json.loads(result.stdout)
        assert [(i["host"], i["launcher"], i["environment"]["SM_CURRENT_INSTANCE_GROUP"]) for i in plan["instances"]] \
            == [("algo-1", "single", "data"), ("algo-2", "torch_distributed", "train"),
                ("algo-3", "torch_distributed", "train")]


@pytest.mark.parametrize(("estimator", "strategy", "launcher"), [
    ("pytorch", "mpi", "mpi"), ("pytorch", "pytorchddp", "pytorchddp"),
    ("tensorflow", "parameter_server", "parameter_server"),
    ("tensorflow", "multi_worker_mirrored_strategy", "multi_worker_mirrored_strategy")])
def test_every_strategy_runs_on_its_group_only(home, script, estimator, strategy, launcher):
    from shipyard.tensorflow import TensorFlow

    cls = PyTorch if estimator == "pytorch" else TensorFlow
    extra = {} if estimator == "pytorch" else {"framework_version": "2.16", "py_version": "py311"}
    groups = [InstanceGroup("data", "local", 1), InstanceGroup("train", "local", 2)]
    launches = cls(entry_point="train.py", source_dir=str(script), instance_groups=groups,
                   distribution={strategy: {"enabled": True}, "instance_groups": ["train"]}, **extra).plan()
    assert [launch.launcher for launch in launches] == ["single", launcher, launcher]
    for launch in launches[1:]:
        training_env = json.loads(launch.env["SM_TRAINING_ENV"])
        assert training_env["distribution_hosts"] == ["algo-2", "algo-3"]
        assert training_env["master_hostname"] == "algo-2"
    if strategy in ("parameter_server", "multi_worker_mirrored_strategy"):
        cluster = json.loads(launches[1].env["TF_CONFIG"])["cluster"]
        assert sum(len(tasks) for role, tasks in cluster.items() if role != "ps") == 2   # the train hosts only


def test_a_sharded_channel_is_dealt_over_the_hosts_that_get_it(home, script, tmp_path):
    (tmp_path / "parts").mkdir()
    channel = TrainingInput(str(tmp_path / "parts"), distribution="ShardedByS3Key", instance_groups=["train"])
    configs = {launch.instance.host: launch.instance.config for launch in _estimator(script).plan({"parts": channel})}
    assert configs["algo-1"].channels == ()
    assert [configs[h].share(configs[h].channels[0]) for h in ("algo-2", "algo-3")] == [(0, 2), (1, 2)]
    everywhere = TrainingInput(str(tmp_path / "parts"), distribution="ShardedByS3Key")
    configs = {launch.instance.host: launch.instance.config for launch in _estimator(script).plan({"all": everywhere})}
    shares = [configs[h].share(configs[h].channels[0]) for h in ("algo-1", "algo-2", "algo-3")]
    assert shares == [(0, 3), (1, 3), (2, 3)]
