"""The built-in XGBoost algorithm's hyperparameters, as SageMaker documents them (xgboost_hyperparameters.html)
and its container validates them (sagemaker-xgboost-container, algorithm_mode/hyperparameter_validation.py):
names, types, ranges and the rules between them. They arrive as SageMaker gives built-in algorithms their
hyperparameters, plain strings ("0.2", "binary:logistic", "auc,rmse"); `validate` returns XGBoost's
parameters, typed. The SDK runs the same check before anything is submitted, so a bad value is an error at
`Estimator(...)`, never minutes into a job.

Where XGBoost 3 no longer has what an older image's value asked for, the value is translated (never
dropped without a word): `reg:linear` is `reg:squarederror`, `tree_method=gpu_hist` is `hist` on `cuda`;
`predictor` only picked the prediction device and is left out (`describe_translations` says so in the log)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from shipyard.algorithms.xgboost.metrics import MAXIMIZE, MINIMIZE, TUNING_OBJECTIVE, eval_metrics, metric_names
from shipyard.errors import ValidationError, unknown_name_error

Interval = tuple[float | None, bool, float | None, bool]   # (low, low closed, high, high closed)


@dataclass(frozen=True)
class Hyperparameter:
    kind: str                          # int, float, category, list (comma-separated categories), text
    interval: Interval | None = None   # int and float
    choices: tuple[str, ...] = ()      # category and list
    required: bool = False

    def parse(self, name: str, raw: str) -> Any:
        field = f"hyperparameters[{name!r}]"
        if self.kind in ("int", "float"):
            try:
                number = float(raw)
            except ValueError:
                raise ValidationError(field, raw, f"must be {'an integer' if self.kind == 'int' else 'a number'}"
                                      f"{_interval_text(self.interval)}") from None
            if self.kind == "int":
                if not number.is_integer():
                    raise ValidationError(field, raw, f"must be an integer{_interval_text(self.interval)}")
                number = int(number)
            if not math.isfinite(number) or not _within(number, self.interval):
                raise ValidationError(field, raw, f"out of range: must be{_interval_text(self.interval)}")
            return number
        if self.kind == "text":
            return raw
        if self.kind == "category":
            if raw not in self.choices:
                raise ValidationError(field, raw, f"must be one of {', '.join(self.choices)}")
            return raw
        return [_list_item(field, item.strip(), self.choices) for item in raw.split(",")]


def _within(value: float, interval: Interval | None) -> bool:
    if interval is None:
        return True
    low, low_closed, high, high_closed = interval
    return (low is None or value > low or (low_closed and value == low)) and \
        (high is None or value < high or (high_closed and value == high))


def _interval_text(interval: Interval | None) -> str:
    if interval is None:
        return ""
    low, low_closed, high, high_closed = interval
    left = "(-inf" if low is None else f"{'[' if low_closed else '('}{low:g}"
    right = "inf)" if high is None else f"{high:g}{']' if high_closed else ')'}"
    return f" in {left}, {right}"


def _list_item(field: str, item: str, choices: tuple[str, ...]) -> str:
    """An eval_metric entry: a metric XGBoost computes, or error/ndcg/map with a threshold (`error@0.3`)."""
    name, at, threshold = item.partition("@")
    if at:
        if name not in ("error", "ndcg", "map"):
            raise ValidationError(field, item, "a threshold (@t) is allowed on error, ndcg and map only")
        try:
            float(threshold)
        except ValueError:
            raise ValidationError(field, item, f"the threshold after @ must be a number, e.g. {name}@0.5") from None
        return item
    if item not in choices:
        raise unknown_name_error(field, item, choices)
    return item


def _int(low: float | None = None, high: float | None = None, low_closed: bool = True, high_closed: bool = True,
         required: bool = False) -> Hyperparameter:
    return Hyperparameter("int", (low, low_closed, high, high_closed), required=required)


def _float(low: float | None = None, high: float | None = None, low_closed: bool = True,
           high_closed: bool = True) -> Hyperparameter:
    return Hyperparameter("float", (low, low_closed, high, high_closed))


def _category(*choices: str) -> Hyperparameter:
    return Hyperparameter("category", choices=choices)


OBJECTIVES = (
    "binary:logistic", "binary:logitraw", "binary:hinge", "count:poisson", "multi:softmax", "multi:softprob",
    "rank:pairwise", "rank:ndcg", "rank:map", "reg:linear", "reg:squarederror", "reg:logistic", "reg:gamma",
    "reg:pseudohubererror", "reg:squaredlogerror", "reg:absoluteerror", "reg:tweedie", "survival:aft",
    "survival:cox",
)
EVAL_METRICS = (*MAXIMIZE, *MINIMIZE)

HYPERPARAMETERS: dict[str, Hyperparameter] = {
    "num_round": _int(1, required=True),
    "num_class": _int(2),
    "alpha": _float(0),
    "base_score": _float(0),
    "booster": _category("gbtree", "gblinear", "dart"),
    "colsample_bylevel": _float(0, 1, low_closed=False),
    "colsample_bynode": _float(0, 1, low_closed=False),
    "colsample_bytree": _float(0, 1, low_closed=False),
    "csv_weights": _int(0, 1),
    "early_stopping_rounds": _int(1),
    "eta": _float(0, 1),
    "eval_metric": Hyperparameter("list", choices=EVAL_METRICS),
    "gamma": _float(0),
    "grow_policy": _category("depthwise", "lossguide"),
    "lambda": _float(0),
    "max_bin": _int(0),
    "max_delta_step": _float(0),
    "max_depth": _int(0),
    "max_leaves": _int(0),
    "min_child_weight": _float(0),
    "normalize_type": _category("tree", "forest"),
    "nthread": _int(1),
    "num_parallel_tree": _int(1),
    "objective": _category(*OBJECTIVES),
    "one_drop": _int(0, 1),
    "predictor": _category("auto", "cpu_predictor", "gpu_predictor"),
    "process_type": _category("default", "update"),
    "rate_drop": _float(0, 1),
    "refresh_leaf": _int(0, 1),
    "sample_type": _category("uniform", "weighted"),
    "scale_pos_weight": _float(0, low_closed=False),
    "seed": _int(-(2 ** 31), 2 ** 31 - 1, low_closed=False, high_closed=False),
    "sketch_eps": _float(0, 1, low_closed=False, high_closed=False),
    "skip_drop": _float(0, 1),
    "subsample": _float(0, 1, low_closed=False),
    "tree_method": _category("auto", "exact", "approx", "hist", "gpu_hist"),
    "tweedie_variance_power": _float(1, 2, low_closed=False, high_closed=False),
    "verbosity": _int(0, 3),
    "aft_loss_distribution": _category("normal", "logistic", "extreme"),
    "aft_loss_distribution_scale": _float(0, low_closed=False),
    "huber_slope": _float(0, low_closed=False),
    "max_cat_to_onehot": _int(1),
    "sampling_method": _category("uniform", "gradient_based"),
    "save_model_on_termination": _category("true", "false"),
    TUNING_OBJECTIVE: Hyperparameter("text"),   # a metric's name (checked below)
}
# SageMaker's container knows these; shipyard's algorithm does not train with them yet.
NOT_SUPPORTED = {
    "updater": "an explicit updater (XGBoost 3 picks it from tree_method and booster)",
    "monotone_constraints": "monotone constraints",
    "interaction_constraints": "interaction constraints",
    "dsplit": "column-split data",
    "lambda_bias": "gblinear's bias regularisation (removed from XGBoost)",
    "_kfold": "k-fold cross-validation",
    "_num_cv_round": "k-fold cross-validation",
    "single_precision_histogram": "single-precision GPU histograms (removed from XGBoost)",
    "deterministic_histogram": "GPU histogram determinism (always on in XGBoost 3)",
    "use_dask_gpu_training": "Dask GPU training",
    "prob_buffer_row": "GPU external memory buffers",
}
# Not XGBoost parameters: what the algorithm itself reads.
ALGORITHM_ONLY = frozenset({"num_round", "csv_weights", "early_stopping_rounds", "save_model_on_termination",
                            TUNING_OBJECTIVE})


def _objective_rules(params: dict[str, Any]) -> None:
    objective = params.get("objective", "reg:squarederror")
    multi = objective in ("multi:softmax", "multi:softprob")
    if multi and "num_class" not in params:
        raise ValidationError("hyperparameters['num_class']", None, f"objective {objective!r} needs num_class "
                              "(the number of classes, >= 2)")
    if "num_class" in params and not multi:
        raise ValidationError("hyperparameters['num_class']", params["num_class"], "is only for objective "
                              "multi:softmax or multi:softprob; remove it or set such an objective")
    for metric in params.get("eval_metric", []):
        if metric.startswith("auc") and not objective.startswith(("binary:", "rank:")):
            raise ValidationError("hyperparameters['eval_metric']", metric, "auc applies to binary "
                                  f"classification and ranking only, not objective {objective!r}")
        if metric == "aft-nloglik" and objective != "survival:aft":
            raise ValidationError("hyperparameters['eval_metric']", metric, "needs objective 'survival:aft'")


def _tuning_objective(params: dict[str, Any]) -> None:
    name = params.get(TUNING_OBJECTIVE)
    if name is not None and name not in metric_names():
        raise unknown_name_error(f"hyperparameters[{TUNING_OBJECTIVE!r}]", name, metric_names())


RULES: tuple[Callable[[dict[str, Any]], Any], ...] = (_objective_rules, _tuning_objective, eval_metrics)


def validate(raw: Mapping[str, str]) -> dict[str, Any]:
    """The hyperparameters as given (str -> str, SageMaker's sagemaker_* keys left out), typed and checked;
    raises ValidationError naming the hyperparameter, its value and the fix."""
    params: dict[str, Any] = {}
    for name, value in raw.items():
        if name.startswith("sagemaker_"):
            continue
        if name in NOT_SUPPORTED:
            raise ValidationError(f"hyperparameters[{name!r}]", value, f"{NOT_SUPPORTED[name]} is not supported by "
                                  "shipyard's built-in XGBoost yet; remove it")
        if name not in HYPERPARAMETERS:
            raise unknown_name_error("hyperparameters", name, HYPERPARAMETERS)
        params[name] = HYPERPARAMETERS[name].parse(name, str(value))
    missing = [name for name, hp in HYPERPARAMETERS.items() if hp.required and name not in params]
    if missing:
        raise ValidationError("hyperparameters", ..., f"{', '.join(missing)} is required by the XGBoost algorithm, "
                              "e.g. hyperparameters={'num_round': 100}")
    for rule in RULES:
        rule(params)
    return params


def booster_params(params: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(XGBoost's parameters, what was translated for XGBoost 3) from validated hyperparameters."""
    booster = {k: v for k, v in params.items() if k not in ALGORITHM_ONLY}
    notes = []
    if booster.get("objective") == "reg:linear":
        booster["objective"] = "reg:squarederror"
        notes.append("objective reg:linear is reg:squarederror in XGBoost 3")
    if booster.get("tree_method") == "gpu_hist":
        booster.update(tree_method="hist", device="cuda")
        notes.append("tree_method gpu_hist is tree_method hist with device cuda in XGBoost 3")
    if booster.pop("predictor", None) is not None:
        notes.append("predictor only chose the prediction device and is not an XGBoost 3 parameter; left out")
    return booster, notes
