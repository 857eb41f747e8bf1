"""The built-in XGBoost algorithm under the debugger: with a hook config it saves smdebug's XGBoost collections
(metrics, feature_importance, trees, hyperparameters, labels, predictions) in the debugger's format, and the
XGBoost rules FeatureImportanceOverweight and TreeDepth judge them from a trial, as beside a job."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shipyard.algorithms.xgboost.train import main
from shipyard.contract.layout import Layout
from shipyard.debugger import rule_configs
from shipyard.rules.debugger.trials import Trial
from shipyard.spec.rule_parameters import parse_parameters
from shipyard.spec.rules import rule_module


def _run(tmp_path, monkeypatch, hyperparameters: dict, rows: str, collections: dict) -> Trial:
    """One instance's /opt/ml as the agent lays it out for a job with a debugger hook config; the algorithm run
    in this process; a trial over what it saved."""
    layout = Layout(tmp_path / "ml")
    tmp_path.mkdir(exist_ok=True)
    config = layout.input_config_dir
    config.mkdir(parents=True)
    (config / "hyperparameters.json").write_text(json.dumps(hyperparameters))
    (config / "inputdataconfig.json").write_text(json.dumps({name: {"ContentType": "text/csv"}
                                                             for name in ("train", "validation")}))
    (config / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-1"]}))
    for name in ("train", "validation"):
        layout.channel_dir(name).mkdir(parents=True)
        (layout.channel_dir(name) / "data.csv").write_text(rows)
    tensors = tmp_path / "tensors"
    (config / "debughookconfig.json").write_text(json.dumps({
        "LocalPath": str(tensors), "HookParameters": {"save_interval": "2"},
        "CollectionConfigurations": [{"CollectionName": n, "CollectionParameters": p}
                                     for n, p in collections.items()]}))
    monkeypatch.setenv("SM_INPUT_DIR", str(layout.input_dir))
    monkeypatch.setenv("SMDEBUG_CONFIG_FILE_PATH", str(config / "debughookconfig.json"))
    assert main() == 0
    return Trial(str(tensors))


def _rows(count: int = 300, xor: bool = False) -> str:
    """f0 alone decides the label, or with `xor` f0 and f1 together (a tree needs more than one split)."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(count, 4))
    labels = ((features[:, 0] * features[:, 1] if xor else features[:, 0]) > 0).astype(int)
    return "".join(f"{y}," + ",".join(f"{v:.4f}" for v in row) + "\n" for y, row in zip(labels, features, strict=True))


def _fired(rule: str, trial: Trial, **given: str) -> list[str]:
    module = rule_module("debugger", rule)
    instance = module.RULE(trial, **parse_parameters(rule, module.PARAMETERS, given))
    findings = []
    for step in trial.steps():
        if instance.invoke_at_step(step):
            findings.append(instance.finding)
    return findings


def test_the_algorithm_saves_smdebugs_xgboost_collections(tmp_path, monkeypatch):
    trial = _run(tmp_path, monkeypatch, {"num_round": "5", "objective": "binary:logistic", "max_depth": "2"},
                 _rows(), {name: {} for name in ("metrics", "feature_importance", "trees", "hyperparameters",
                                                 "labels", "predictions")})
    assert trial.steps() == [0, 2, 4]   # save_interval 2, the round as the step
    names = set(trial.tensor_names(step=4))
    assert {"train-logloss", "validation-logloss", "feature_importance/weight/f0", "feature_importance/gain/f0",
            "trees/Node", "trees/Gain", "hyperparameters/max_depth", "labels", "predictions"} <= names
    assert set(trial.tensor_names(step=4, collection="feature_importance")) == {
        n for n in names if n.startswith("feature_importance/")}
    assert trial.tensor("hyperparameters/max_depth").value(0).tolist() == [2]
    assert trial.tensor("labels").value(4).shape == (300,)
    assert trial.tensor("train-logloss").value(4)[0] < trial.tensor("train-logloss").value(0)[0]
    assert trial.ended()


def test_the_xgboost_rules_judge_the_saved_tensors(tmp_path, monkeypatch):
    collections = {**rule_configs.feature_importance_overweight().collections,
                   **rule_configs.tree_depth().collections}
    hyperparameters = {"num_round": "5", "objective": "binary:logistic", "max_depth": "3"}
    one = _run(tmp_path / "one", monkeypatch, hyperparameters, _rows(), collections)
    # The trees split on f0 alone: it holds all of the weight at the one saved step (the rule configs save every 5).
    findings = _fired("FeatureImportanceOverweight", one)
    assert len(findings) == 1 and findings[0].startswith("the 1 most important features (f0) hold 100%")
    assert not _fired("FeatureImportanceOverweight", one, threshold="1.0")
    assert _fired("TreeDepth", one, depth="4", fire_when="shallower")   # one split: a tree of depth 1
    two = _run(tmp_path / "two", monkeypatch, hyperparameters, _rows(xor=True), collections)
    assert _fired("TreeDepth", two, depth="1") == ["the trees are 3 levels deep, deeper than depth=1"]
    assert not _fired("TreeDepth", two, depth="3")   # max_depth 3: never deeper
    assert not _fired("TreeDepth", two, depth="3", fire_when="shallower")


def test_tree_depth_refuses_another_direction():
    with pytest.raises(ValueError, match="fire_when must be"):
        rule_module("debugger", "TreeDepth").RULE(None, depth=4, fire_when="sideways")
