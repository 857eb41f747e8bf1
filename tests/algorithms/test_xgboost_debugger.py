"""The built-in XGBoost algorithm under the debugger: with a hook config it saves smdebug's XGBoost collections
(metrics, feature_importance, trees, hyperparameters, labels, predictions) in the debugger's format, the
XGBoost rules FeatureImportanceOverweight and TreeDepth judge them from a trial, as beside a job, and
CreateXgboostReport renders its HTML training report from them."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest

from shipyard.algorithms.xgboost.train import main
from shipyard.contract.layout import Layout
from shipyard.debugger import rule_configs
from shipyard.rules.debugger.trials import Trial
from shipyard.rules.debugger.watcher import DebuggerRulesWatcher
from shipyard.rules.debugger.xgboost_report import problem, render
from shipyard.spec.rule_parameters import parse_parameters
from shipyard.spec.rules import RuleConfig, rule_module


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


def _rows(count: int = 300, xor: bool = False, regression: bool = False) -> str:
    """f0 alone decides the label, or with `xor` f0 and f1 together (a tree needs more than one split); with
    `regression` the label is 2 f0 - f2 and noise."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(count, 4))
    labels = ((features[:, 0] * features[:, 1] if xor else features[:, 0]) > 0).astype(int)
    if regression:
        labels = 2 * features[:, 0] - features[:, 2] + 0.1 * rng.normal(size=count)
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


def _report_of(tmp_path, monkeypatch, hyperparameters: dict, rows: str, job: str = "xgb-report") -> str:
    trial = _run(tmp_path, monkeypatch, hyperparameters, rows, rule_configs.create_xgboost_report().collections)
    return render(trial, job)


def test_the_xgboost_report_of_a_classification(tmp_path, monkeypatch):
    html = _report_of(tmp_path, monkeypatch, {"num_round": "11", "objective": "binary:logistic", "max_depth": "2",
                                              "eval_metric": "logloss,error"}, _rows(), job="xgb-<script>")
    # Text from the job is escaped; the page is one offline file with the charts inline.
    assert "xgb-&lt;script&gt;" in html and "<script" not in html and "http" not in html.replace(
        "http://www.w3.org/2000/svg", "")
    assert "<td>problem</td><td>binary classification</td>" in html
    assert "<td>max_depth</td><td>2</td>" in html   # the hyperparameters, saved at round 0
    # The metrics of both datasets, a chart each, first and last values.
    for metric in ("logloss", "error"):
        assert f"<td>{metric}</td><td>train</td><td>0</td>" in html and f"<td>{metric}</td><td>validation</td>" in html
        assert f'aria-label="{metric} by round"' in html
    # f0 decides the label: it tops the importance table with all the gain.
    assert "<tr><td>f0</td><td>100.0</td><td>100.0</td>" in html
    assert "Binary classification, at round 10" in html
    # The confusion matrix of the 300 validation rows: (nearly) all on the diagonal.
    matrix = re.search(r'<table class="confusion">(.*?)</table>', html, re.S).group(1)
    cells = [[int(c) for c in re.findall(r"<td>(\d+)</td>", row)[1:]] for row in matrix.split("<tr>")[2:]]
    assert sum(map(sum, cells)) == 300 and cells[0][0] + cells[1][1] >= 290
    assert "<th>precision</th>" in html and 'aria-label="accuracy by round"' in html
    assert "residual" not in html


def test_the_xgboost_report_of_a_regression(tmp_path, monkeypatch):
    html = _report_of(tmp_path, monkeypatch, {"num_round": "6", "objective": "reg:squarederror", "max_depth": "3"},
                      _rows(regression=True))
    assert "<td>rmse</td><td>train</td>" in html and "Regression, at round 5" in html
    top = re.findall(r"<tr><td>(f\d)</td>", html)
    assert top[:2] == ["f0", "f2"]   # the label is 2 f0 - f2
    assert "<td>root mean squared error</td>" in html and 'aria-label="residuals (label − prediction)"' in html
    assert "Confusion matrix" not in html


@pytest.mark.parametrize(("labels", "predictions", "kind"), [
    ([0, 1, 1], [0.2, 0.9, 0.6], "binary classification"),
    ([0, 2, 1], [[0.8, 0.1, 0.1], [0.1, 0.1, 0.8], [0.2, 0.7, 0.1]], "multiclass classification"),
    ([0, 2, 1], [0, 2, 2], "multiclass classification"),
    ([0.5, 1.5, 3.2], [0.4, 1.2, 3.0], "regression"),
    ([0, 1, 3], [0.4, 1.2, 3.0], "regression"),   # whole-number labels with a regression's predictions
])
def test_the_problem_is_told_from_the_labels_and_predictions(labels, predictions, kind):
    assert problem(np.array(labels, dtype=float), np.array(predictions)) == kind


class _Statuses:
    def __init__(self) -> None:
        self.statuses: dict[str, tuple[str, str]] = {}

    def set_rule_status(self, job, kind, name, status, details="") -> None:
        self.statuses[name] = (status, details)


def test_the_watcher_publishes_the_report_in_the_rules_output_folder(tmp_path, monkeypatch):
    """Where SageMaker leaves it: <output>/<job>/rule-output/<rule>/xgboost_report.html; a report that cannot be
    written there makes the rule Error."""
    _run(tmp_path, monkeypatch, {"num_round": "6", "objective": "binary:logistic"}, _rows(),
         rule_configs.create_xgboost_report().collections)
    out = tmp_path / "out"
    for job in ("job", "unwritable"):   # the jobs' debug output: what the algorithm saved (in tmp_path/tensors)
        (out / job).mkdir(parents=True)
        (out / job / "debug-output").symlink_to(tmp_path / "tensors")
    (out / "unwritable" / "rule-output").write_text("a file where the folder goes")
    for job, status in (("job", "NoIssuesFound"), ("unwritable", "Error")):
        spec = SimpleNamespace(job_name=job, output_path=str(out), debugger_hook_config=None,
                               rules=[RuleConfig(kind="debugger", name="report", rule="CreateXgboostReport")])
        store = _Statuses()
        watcher = DebuggerRulesWatcher(spec, store)
        assert watcher.finish() is None
        assert store.statuses["report"][0] == status, store.statuses
    report = (out / "job" / "rule-output" / "report" / "xgboost_report.html").read_text()
    assert "<h1>XGBoost training report: job</h1>" in report and "Binary classification, at round 5" in report
