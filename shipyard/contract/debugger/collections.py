"""Collections: named groups of tensors chosen by regex over tensor names, each with its own SaveConfig,
reductions and histogram choice. The built-ins are PyTorch's (smdebug/pytorch/collection.py), plus the
collections SageMaker's rule configs and docs define by regex (relu_input, tanh_input, input_image, ...)
so a built-in rule's default collections resolve; any other name is a custom collection and needs an
include_regex. Torch-free.

Tensor names (hook.py): `<RootClass>_<param>` weights and biases, `gradient/<RootClass>_<param>`,
`<module>_input_<i>` and `<module>_output_<i>`, where a root module is named by its class (CamelCase) and
a submodule by its attribute path in named_modules() (`fc1`, `relu1`, `0`, `encoder.embedding`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from shipyard.contract.debugger.save_config import SaveConfig

BUILTIN_REGEX = {
    "all": r".*",
    "default": r".*",
    "weights": r"^(?!gradient).*weight",
    "biases": r"^(?!gradient).*bias",
    "gradients": r"^gradient",
    "losses": r"[Ll]oss_(?!input).*output",
    "outputs": r"_output_\d+$",
    "inputs": r"_input_\d+$",
    "layers": r"_(input|output)_\d+$",
    "relu_activations": r"relu.*_output_\d+$",
    # SageMaker's rule configs define these by regex (ruleConfigs.json: `.*relu_input`, ...); here a
    # module's attribute name may carry a suffix (`relu1`), as an nn.Sequential's children are "0", "1".
    "relu_input": r"(?i)relu\w*_input_\d+$",
    "relu_output": r"(?i)relu\w*_output_\d+$",
    "tanh_input": r"(?i)tanh\w*_input_\d+$",
    "tanh_output": r"(?i)tanh\w*_output_\d+$",
    "sigmoid_input": r"(?i)sigmoid\w*_input_\d+$",
    "sigmoid_output": r"(?i)sigmoid\w*_output_\d+$",
    # The model's own input: the root module, named by its class (a loss module excepted), takes it
    # (smdebug's MXNet regex names the root block the same way: `.*hybridsequential0_input_0`).
    "input_image": r"^(?![A-Za-z0-9]*Loss_)[A-Z][A-Za-z0-9]*_input_0$",
    # Token ids: the input of an embedding layer (smdebug: `.*embedding0_input_0`).
    "input_sequence": r"(?i)embedding\w*_input_0$",
    # Tabular and classification rules (ClassImbalance, ...): tensors recorded by these names.
    "labels": r"labels",
    "predictions": r"predictions",
    # The built-in XGBoost algorithm's (shipyard/algorithms/xgboost/debug.py, smdebug's XGBoost names).
    "metrics": r"^(train|validation)-",
    "feature_importance": r"^feature_importance/",
    "trees": r"^trees/",
    "hyperparameters": r"^hyperparameters/",
}
ALWAYS_SAVED = ("losses",)  # as smdebug does for PyTorch; give it end_step=0 to suppress
SCALAR = ("losses", "metrics")  # never reduced: they are scalars already
REDUCTIONS = ("min", "max", "mean", "std", "variance", "sum", "prod")
NORMS = ("l1", "l2")
COLLECTION_KEYS = ("include_regex", "save_histogram", "reductions", "save_raw_tensor")


@dataclass(frozen=True)
class Collection:
    name: str
    regex: tuple[re.Pattern, ...]
    save_config: SaveConfig
    reductions: tuple[str, ...] = ()  # e.g. "mean", "abs_max", "l2"
    save_raw_tensor: bool = True
    save_histogram: bool = False
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def matches(self, tensor_name: str) -> bool:
        hit = self._cache.get(tensor_name)
        if hit is None:
            hit = self._cache[tensor_name] = any(p.search(tensor_name) for p in self.regex)
        return hit


def parse_reductions(text: str) -> tuple[str, ...]:
    names = tuple(r.strip() for r in text.split(",") if r.strip())
    for name in names:
        plain = name.removeprefix("abs_")
        if plain not in REDUCTIONS and plain not in NORMS:
            raise ValueError(f"unknown reduction {name!r}; use {', '.join(REDUCTIONS + NORMS)} "
                             "(abs_ prefixed for absolute values)")
    return names


def build(name: str, parameters: dict[str, str], hook_save: SaveConfig, hook_reductions: tuple[str, ...],
          save_raw_default: bool) -> Collection:
    regex_text = parameters.get("include_regex")
    patterns = [p for p in (regex_text or "").split(",") if p] or [BUILTIN_REGEX[name]]
    reductions = parse_reductions(parameters["reductions"]) if "reductions" in parameters else hook_reductions
    reductions = () if name in SCALAR else reductions  # a scalar's raw value is kept, never reduced
    raw = parameters.get("save_raw_tensor")
    histogram = parameters.get("save_histogram", "false").lower() == "true" and name not in SCALAR
    return Collection(
        name=name,
        regex=tuple(re.compile(p) for p in patterns),
        save_config=SaveConfig.from_parameters(parameters, base=hook_save),
        reductions=reductions,
        save_raw_tensor=(raw.lower() == "true") if raw is not None else (save_raw_default or not reductions),
        save_histogram=histogram,
    )
