"""The XGBoost training report (CreateXgboostReport) from the tensors the built-in algorithm saved
(shipyard/algorithms/xgboost/debug.py): one self-contained HTML file in the profiling report's style and
with its machinery (shipyard.rules.profiler.report.page, charts), in the order of SageMaker's report: the
hyperparameters, the label distribution, the metrics of each dataset over the rounds, feature importance,
and the model's validation predictions at the last saved round: for classification the confusion matrix,
each class's precision, recall and F1 and the accuracy over the rounds; for regression the residuals and the
errors over the rounds.

The saved tensors do not say the objective (hyperparameters are saved when numeric), so the problem is told
from the labels and predictions, as the objectives make them: class numbers as labels with probabilities
(binary:logistic), a row of them per sample (multi:softprob) or class numbers (multi:softmax) as
predictions is classification; anything else regression."""

from __future__ import annotations

import time

import numpy as np
from markupsafe import Markup

from shipyard.rules.profiler import charts
from shipyard.rules.profiler.report import page

PAGE = page("xgboost_report.html", "shipyard.rules.debugger")
IMPORTANCE = ("weight", "gain", "cover", "total_gain", "total_cover")
TOP = 10  # features in the importance table; the chart follows the first 5 of them
MAX_CLASSES = 50  # class numbers beyond this many are taken as a regression's values


def render(trial, job: str) -> str:
    steps = trial.steps()
    evaluated = [s for s in steps if {"labels", "predictions"} <= set(trial.tensor_names(step=s))]
    last = evaluated[-1] if evaluated else None
    labels = trial.tensor("labels").value(last) if last is not None else None
    predictions = trial.tensor("predictions").value(last) if last is not None else None
    kind = problem(labels, predictions) if last is not None else None
    return PAGE.render(
        job=job, generated=time.strftime("%Y-%m-%d %H:%M:%S"),
        summary=[("rounds saved", ", ".join(map(str, steps)) or "none"), ("workers", ", ".join(trial.workers())),
                 ("problem", kind or "unknown: no labels and predictions were saved"),
                 *([("validation rows", str(len(labels)))] if labels is not None else [])],
        hyperparameters=_hyperparameters(trial, steps), metrics=_metrics(trial, steps),
        importance=_importance(trial, steps), last=last, kind=kind,
        labels=_labels(labels, kind) if labels is not None else None,
        evaluation=(_classification(trial, evaluated, labels, predictions) if kind and kind != "regression" else
                    _regression(trial, evaluated, labels, predictions) if kind else None))


def problem(labels, predictions) -> str:
    """'binary classification', 'multiclass classification' or 'regression' (see the module's docstring)."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    classes = np.unique(labels)
    if not (np.all(classes == np.rint(classes)) and classes.min() >= 0 and len(classes) <= MAX_CLASSES):
        return "regression"
    if predictions.ndim == 2 and predictions.shape[0] == len(labels):
        return "multiclass classification"
    if set(classes) <= {0, 1} and predictions.min() >= 0 and predictions.max() <= 1:
        return "binary classification"
    if np.all(predictions == np.rint(predictions)) and len(np.unique(predictions)) <= MAX_CLASSES:
        return "multiclass classification"
    return "regression"


def predicted_classes(predictions, kind: str):
    predictions = np.asarray(predictions)
    if predictions.ndim == 2:
        return predictions.argmax(axis=1)
    return (predictions > 0.5).astype(int) if kind == "binary classification" else np.rint(predictions).astype(int)


def _number(value: float) -> str:
    return f"{value:.6g}"


def _first_with(trial, steps: list[int], collection: str) -> tuple[int | None, list[str]]:
    for step in steps:
        names = trial.tensor_names(step=step, collection=collection)
        if names:
            return step, names
    return None, []


def _hyperparameters(trial, steps: list[int]) -> list[tuple[str, str]]:
    step, names = _first_with(trial, steps, "hyperparameters")
    return [(name.removeprefix("hyperparameters/"), _number(float(trial.tensor(name).value(step)[0])))
            for name in names]


def _metrics(trial, steps: list[int]) -> dict | None:
    """Per metric, each dataset's values over the rounds (a chart), and a table of the first and last."""
    curves: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for step in steps:
        for name in trial.tensor_names(step=step, collection="metrics"):
            dataset, _, metric = name.partition("-")
            curves.setdefault(metric, {}).setdefault(dataset, []).append(
                (step, float(trial.tensor(name).value(step)[0])))
    if not curves:
        return None
    rows = [(metric, dataset, str(points[0][0]), _number(points[0][1]), str(points[-1][0]), _number(points[-1][1]))
            for metric, datasets in curves.items() for dataset, points in datasets.items()]
    return {"rows": rows, "charts": [(f"{metric} by round", Markup(charts.line_chart(
        f"{metric} by round", datasets, metric, x_label="round", from_zero=False, whole_x=True)))
        for metric, datasets in curves.items()]}


def _shares(trial, step: int, kind: str) -> dict[str, float]:
    """Each feature's share (%) of the total importance of that kind at a step."""
    prefix = f"feature_importance/{kind}/"
    values = {name.removeprefix(prefix): float(trial.tensor(name).value(step)[0])
              for name in trial.tensor_names(step=step, collection="feature_importance") if name.startswith(prefix)}
    total = sum(values.values())
    return {feature: 100 * value / total for feature, value in values.items()} if total > 0 else {}


def _importance(trial, steps: list[int]) -> dict | None:
    """The last saved round's importance of the TOP features (each kind's share of its total), and the gain
    share of the first five over the rounds."""
    saved = [s for s in steps if trial.tensor_names(step=s, collection="feature_importance")]
    if not saved:
        return None
    shares = {kind: _shares(trial, saved[-1], kind) for kind in IMPORTANCE}
    order = "gain" if shares["gain"] else "weight"
    top = sorted(shares[order], key=shares[order].get, reverse=True)[:TOP]
    rows = [(feature, *(f"{shares[kind].get(feature, 0.0):.1f}" for kind in IMPORTANCE)) for feature in top]
    series = {feature: [(s, _shares(trial, s, order).get(feature, 0.0)) for s in saved] for feature in top[:5]}
    return {"step": saved[-1], "order": order, "header": ["feature", *(f"{k} (%)" for k in IMPORTANCE)],
            "rows": rows, "top": top, "chart": Markup(charts.line_chart(
                f"{order} share of the top features by round", series, f"% of the total {order}", y_max=100,
                x_label="round", from_zero=False, whole_x=True))}


def _labels(labels, kind: str) -> dict:
    if kind == "regression":
        statistics = (("mean", np.mean), ("std", np.std), ("min", np.min), ("median", np.median), ("max", np.max))
        return {"header": [], "rows": [("rows", str(len(labels))),
                                       *((name, _number(float(fn(labels)))) for name, fn in statistics)],
                "chart": Markup(charts.histogram("label distribution", list(map(float, labels)), x_label="label",
                                                 y_label="rows"))}
    classes, counts = np.unique(labels.astype(int), return_counts=True)
    return {"header": ["class", "rows", "share (%)"], "chart": None,
            "rows": [(str(c), str(n), f"{100 * n / len(labels):.1f}") for c, n in zip(classes, counts, strict=True)]}


def _classification(trial, steps: list[int], labels, predictions) -> dict:
    kind = problem(labels, predictions)
    truth, guessed = labels.astype(int), predicted_classes(predictions, kind)
    classes = sorted(set(truth) | set(guessed))
    matrix = [[int(np.sum((truth == t) & (guessed == p))) for p in classes] for t in classes]
    per_class = []
    for i, c in enumerate(classes):
        hit, said, real = matrix[i][i], sum(row[i] for row in matrix), sum(matrix[i])
        precision, recall = (hit / said if said else 0.0), (hit / real if real else 0.0)
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class.append((str(c), str(real), f"{precision:.3f}", f"{recall:.3f}", f"{f1:.3f}"))
    accuracy = []
    for step in steps:
        truth_at = trial.tensor("labels").value(step).astype(int)
        accuracy.append((step, float(np.mean(predicted_classes(trial.tensor("predictions").value(step), kind)
                                             == truth_at))))
    return {"accuracy": _number(float(np.mean(truth == guessed))),
            "matrix_header": ["label \\ predicted", *map(str, classes)],
            "matrix": [(str(c), *map(str, row)) for c, row in zip(classes, matrix, strict=True)],
            "per_class_header": ["class", "rows", "precision", "recall", "F1"], "per_class": per_class,
            "chart": Markup(charts.line_chart("accuracy by round", {"validation": accuracy}, "accuracy", y_max=1,
                                              x_label="round", from_zero=False, whole_x=True))}


def _regression(trial, steps: list[int], labels, predictions) -> dict:
    residuals = labels - predictions.reshape(labels.shape)
    errors = {"mean absolute error": [], "root mean squared error": []}
    for step in steps:
        off = trial.tensor("labels").value(step) - trial.tensor("predictions").value(step).reshape(-1)
        errors["mean absolute error"].append((step, float(np.mean(np.abs(off)))))
        errors["root mean squared error"].append((step, float(np.sqrt(np.mean(off ** 2)))))
    spread = float(np.var(labels))
    return {"rows": [("mean residual", _number(float(residuals.mean()))),
                     ("residual std", _number(float(residuals.std()))),
                     ("mean absolute error", _number(float(np.mean(np.abs(residuals))))),
                     ("root mean squared error", _number(float(np.sqrt(np.mean(residuals ** 2))))),
                     ("R²", _number(1 - float(np.mean(residuals ** 2)) / spread) if spread else "undefined")],
            "residuals": Markup(charts.histogram("residuals (label − prediction)", list(map(float, residuals)),
                                                 x_label="residual", y_label="rows")),
            "chart": Markup(charts.line_chart("validation errors by round", errors, "error", x_label="round",
                                              from_zero=False, whole_x=True))}
