"""@smp.step: the decorated function runs once per micro-batch (`microbatches` in mp_parameters), its
tensor arguments split along their batch axis, and what it returns comes back with every tensor (and
every other value) gathered over the micro-batches into a StepOutput. The model call and
model.backward() inside it are the DistributedModel's business (model.py), which runs the micro-batches
through the pipeline stages or, without pipeline parallelism, one after another."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

from shipyard.errors import ValidationError

from . import state


class StepOutput:
    """One returned value of an @smp.step function, for every micro-batch (`outputs`, in order)."""

    def __init__(self, outputs: list[Any]) -> None:
        self.outputs = list(outputs)

    def _tensors(self) -> list[torch.Tensor]:
        return [torch.as_tensor(o) for o in self.outputs]

    def reduce_mean(self) -> torch.Tensor:
        return torch.stack(self._tensors()).mean(dim=0)

    def reduce_sum(self) -> torch.Tensor:
        return torch.stack(self._tensors()).sum(dim=0)

    def concat(self) -> torch.Tensor:
        return torch.cat(self._tensors(), dim=0)

    def stack(self) -> torch.Tensor:
        return torch.stack(self._tensors())

    def __iter__(self):
        return iter(self.outputs)

    def __len__(self) -> int:
        return len(self.outputs)

    def __getitem__(self, index: int) -> Any:
        return self.outputs[index]

    def __repr__(self) -> str:
        return f"StepOutput({self.outputs!r})"


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(value, "_fields")


def split(value: Any, parts: int, axis: int, where: str) -> list[Any]:
    """`value` for each of `parts` micro-batches: tensors sliced along `axis`, containers element-wise,
    objects with `smp_slice(num_mb, mb, axis)` by it; anything else is given whole to each."""
    if isinstance(value, torch.Tensor):
        if value.dim() == 0:
            return [value] * parts
        if value.shape[axis] % parts:
            raise ValidationError(where, tuple(value.shape), f"its batch axis {axis} ({value.shape[axis]}) does not "
                                  f"divide into microbatches={parts}: use a batch size divisible by it "
                                  "(DataLoader(drop_last=True)), or name the argument in "
                                  "@smp.step(non_split_inputs=[...])")
        return list(torch.tensor_split(value, parts, dim=axis))
    if hasattr(value, "smp_slice"):
        return [value.smp_slice(parts, mb, axis) for mb in range(parts)]
    if isinstance(value, dict):
        columns = {key: split(item, parts, axis, f"{where}[{key!r}]") for key, item in value.items()}
        return [type(value)((key, column[mb]) for key, column in columns.items()) for mb in range(parts)]
    if isinstance(value, (list, tuple)):
        columns = [split(item, parts, axis, f"{where}[{i}]") for i, item in enumerate(value)]
        rows = [[column[mb] for column in columns] for mb in range(parts)]
        return [type(value)(*row) if _is_namedtuple(value) else type(value)(row) for row in rows]
    return [value] * parts


def gather(results: list[Any]) -> Any:
    """Per-micro-batch return values -> one value of the same shape with StepOutput leaves."""
    first = results[0]
    if first is None:
        return None
    if isinstance(first, dict):
        return type(first)((key, gather([r[key] for r in results])) for key in first)
    if isinstance(first, (list, tuple)):
        items = [gather([r[i] for r in results]) for i in range(len(first))]
        return type(first)(*items) if _is_namedtuple(first) else type(first)(items)
    return StepOutput(results)


def map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, dict):
        return type(value)((key, map_tensors(item, fn)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        items = [map_tensors(item, fn) for item in value]
        return type(value)(*items) if _is_namedtuple(value) else type(value)(items)
    return value


class Step:
    def __init__(self, function: Callable, non_split_inputs: list[str], input_split_axes: dict[str, int],
                 detach_outputs: bool) -> None:
        self.function = function
        self.signature = inspect.signature(function)
        for name in [*non_split_inputs, *input_split_axes]:
            if name not in self.signature.parameters:
                raise ValidationError("smp.step", name, f"is not an argument of {function.__qualname__}; its "
                                      f"arguments are {', '.join(self.signature.parameters)}")
        self.non_split, self.axes, self.detach = set(non_split_inputs), dict(input_split_axes), detach_outputs
        functools.update_wrapper(self, function)

    def micro_batches(self, args: tuple, kwargs: dict, parts: int) -> list[tuple[tuple, dict]]:
        bound = self.signature.bind(*args, **kwargs)
        columns = {name: [value] * parts if name in self.non_split else
                   split(value, parts, self.axes.get(name, 0), f"smp.step argument {name!r}")
                   for name, value in bound.arguments.items()}
        calls = []
        for mb in range(parts):
            one = inspect.BoundArguments(self.signature, {name: column[mb] for name, column in columns.items()})
            calls.append((one.args, one.kwargs))
        return calls

    def __call__(self, *args, **kwargs):
        current = state.get("smp.step")
        if current.model is None:
            raise ValidationError("smp.step", self.function.__qualname__,
                                  "wrap the model first: model = smp.DistributedModel(model)")
        calls = self.micro_batches(args, kwargs, current.config.get("microbatches", 1))
        results = current.model.run_step(self.function, calls, self.detach)
        if self.detach:
            results = [map_tensors(result, torch.Tensor.detach) for result in results]
        return gather(results)


def step(function: Callable | None = None, non_split_inputs: list[str] | None = None,
         input_split_axes: dict[str, int] | None = None, detach_outputs: bool = True, **options: Any):
    """`@smp.step` or `@smp.step(non_split_inputs=[...], input_split_axes={...}, detach_outputs=True)`."""
    if options:
        raise ValidationError("smp.step", sorted(options), "unknown arguments; it takes non_split_inputs, "
                                                          "input_split_axes and detach_outputs")
    if function is not None and not callable(function):  # @smp.step(["mask"]): SMP's positional form
        function, non_split_inputs = None, function

    def decorate(fn: Callable) -> Step:
        return Step(fn, list(non_split_inputs or []), dict(input_split_axes or {}), detach_outputs)

    return decorate(function) if function is not None else decorate
