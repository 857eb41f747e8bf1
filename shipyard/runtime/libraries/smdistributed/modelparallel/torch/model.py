"""smp.DistributedModel and smp.DistributedOptimizer over shipyard.parallel.prepare().

As in SMP v1, the model is partitioned at the first @smp.step call, with the optimizer that
smp.DistributedOptimizer wrapped (prepare() rebinds it to this rank's parameters), and the strategies
are the job's mp_parameters: `partitions` cut an nn.Sequential into pipeline stages
(torch.distributed.pipelining, `pipeline` choosing 1F1B or GPipe), `ddp` averages replicas, and so on.

How a step runs the script's function, once per micro-batch:
- one stage (no pipeline parallelism): the function runs as written; `model(x)` is the prepared model's
  forward and `model.backward(loss)` a backward scaled by 1/microbatches (gradients averaged over the
  micro-batches, SMP's default); DDP synchronises gradients on the last micro-batch only.
- pipeline stages: the first stage runs the function up to the model call to learn each micro-batch's
  input (the call stops it there); the schedule then runs the stages together, and on the last stage it
  calls the function for each micro-batch as the loss: `model(x)` returns that micro-batch's output of
  the pipeline and the tensor given to `model.backward` is what the schedule back-propagates through
  every stage. The last stage's return values are then sent to the pipeline's other stages, so every
  rank gets the same StepOutputs (SMP broadcasts the model's output to all stages, so there too every
  rank computes the same loss)."""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     set_model_state_dict)
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel
from torch.optim import Optimizer

from shipyard.errors import ValidationError, unknown_name_error
from shipyard.parallel import preparation, process_group
from shipyard.parallel.optimizer import ParallelOptimizer
from shipyard.parallel.strategies.pipeline import PipelineModel

from . import state
from .step import map_tensors

PARTIAL = "_smp_is_partial"  # SMP's key marking a state dict of one model-parallel rank's part
# DistributedModel's documented options: their defaults, and which other values shipyard honours
OPTIONS: dict[str, tuple[Any, str | None]] = {
    # (SMP's default, why another value is refused; None: any value is honoured or changes nothing here)
    "trace_device": ("gpu", None),                  # no tracing: stages are cut by layer count
    "trace_execution_times": (False, None),
    "trace_memory_usage": (False, None),
    "overlapping_allreduce": (True, None),          # DDP overlaps; the pipeline averages after the step
    "average_grads_across_microbatches": (True, None),
    "backward_passes_per_step": (1, "use gradient_accumulation_steps in the job's mp_parameters"),
    "bucket_cap_mb": (25, "shipyard's DDP keeps PyTorch's default bucket size"),
    "broadcast_buffers": (True, "shipyard's DDP always broadcasts buffers"),
    "gradient_as_bucket_view": (False, "shipyard's DDP keeps gradients apart from its buckets"),
}
DYNAMIC_LOSS_ARGS = ("init_scale", "scale_factor", "scale_window", "min_scale", "delayed_shift",
                     "consecutive_hysteresis")


class _Captured(BaseException):  # not an Exception: a script's `except Exception` must not swallow it
    def __init__(self, inputs: torch.Tensor) -> None:
        self.inputs = inputs


class _MicroBatch:
    """What model(...) and model.backward(...) mean inside the step function for one micro-batch."""

    backward_called = False

    def forward(self, model: DistributedModel, args: tuple, kwargs: dict) -> Any:
        raise NotImplementedError

    def backward(self, tensors, grad_tensors) -> None:
        raise ValidationError("model.backward", ..., "call the model first, in the same @smp.step function")


class _Local(_MicroBatch):
    def __init__(self, scale: float) -> None:
        self.scale = scale

    def forward(self, model, args, kwargs):
        return model.module(*args, **kwargs)

    def backward(self, tensors, grad_tensors) -> None:
        tensors, grads = _as_lists(tensors, grad_tensors)
        torch.autograd.backward(tensors, [g * self.scale for g in grads])
        self.backward_called = True


class _Capture(_MicroBatch):
    """The first pipeline stage: learn the model's input, stop the function there."""

    def forward(self, model, args, kwargs):
        if kwargs or len(args) != 1 or not isinstance(args[0], torch.Tensor):
            raise ValidationError("smp.DistributedModel call", f"{len(args)} positional, {sorted(kwargs)} keyword",
                                  "with pipeline stages (partitions > 1) the model takes one input tensor: "
                                  "model(inputs)")
        raise _Captured(args[0])


class _LastStage(_MicroBatch):
    """The last pipeline stage, inside the schedule's loss: the pipeline's output for this micro-batch."""

    def __init__(self, output: torch.Tensor) -> None:
        self.output, self.called, self.loss = output, False, None

    def forward(self, model, args, kwargs):
        if self.called:
            raise ValidationError("smp.DistributedModel call", "twice", "with pipeline stages the step function "
                                  "calls the model once per micro-batch")
        self.called = True
        return self.output

    def backward(self, tensors, grad_tensors) -> None:
        tensors, grads = _as_lists(tensors, grad_tensors)
        # A scalar whose gradient is the one asked for: the schedule back-propagates it.
        self.loss = sum((t * g).sum() for t, g in zip(tensors, grads))
        self.backward_called = True


def _as_lists(tensors, grad_tensors) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    tensors = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
    if grad_tensors is None:
        for t in tensors:
            if t.numel() != 1:
                raise ValidationError("model.backward", tuple(t.shape), "a non-scalar output needs its gradient: "
                                      "model.backward(outputs, out_grads)")
        return tensors, [torch.ones_like(t) for t in tensors]
    grads = [grad_tensors] if isinstance(grad_tensors, torch.Tensor) else list(grad_tensors)
    return tensors, grads


_current: list[_MicroBatch] = []  # the micro-batch being run, while a step function runs


@contextlib.contextmanager
def _running(micro_batch: _MicroBatch):
    _current.append(micro_batch)
    try:
        yield micro_batch
    finally:
        _current.pop()


def _inside(call: str) -> _MicroBatch:
    if not _current:
        raise ValidationError(call, ..., "call it inside a function decorated with @smp.step, which runs it "
                                         "for each micro-batch")
    return _current[-1]


def _unwrapped(model: nn.Module) -> nn.Module:
    """The module holding this rank's layers under their names in the user's model."""
    return model.module if isinstance(model, (PipelineModel, DistributedDataParallel)) else model


class DistributedModel(nn.Module):
    """The model to partition; only one per script (as in SMP)."""

    def __init__(self, module: nn.Module, **options: Any) -> None:
        current = state.get("smp.DistributedModel")
        if current.model is not None:
            raise ValidationError("smp.DistributedModel", type(module).__name__,
                                  "only one model can be wrapped; wrap the model that trains")
        for name, value in options.items():
            if name not in OPTIONS:
                raise unknown_name_error("smp.DistributedModel", name, OPTIONS)
            default, refusal = OPTIONS[name]
            if refusal and value != default:
                raise ValidationError(f"smp.DistributedModel.{name}", value, f"only {default!r} is served: {refusal}")
        super().__init__()
        self.module = module
        self.partitioned = False
        self._average = options.get("average_grads_across_microbatches", True)
        self._hooks: OrderedDict[int, Callable] = OrderedDict()
        self._pending: tuple | None = None   # (function, calls, results) while a pipeline step runs
        self._training_step = False          # the running step back-propagates
        current.model = self

    # -- partitioning --------------------------------------------------------------------------------

    def register_post_partition_hook(self, hook: Callable) -> torch.utils.hooks.RemovableHandle | None:
        """`hook(model, optimizer)` after the partition (at once when it already happened)."""
        if self.partitioned:
            hook(self, state.get("model.register_post_partition_hook").optimizer)
            return None
        handle = torch.utils.hooks.RemovableHandle(self._hooks)
        self._hooks[handle.id] = hook
        return handle

    def _partition(self) -> None:
        current = state.get("smp.step")
        wrapper = current.optimizer
        if wrapper is None and current.layout.tp > 1:
            raise ValidationError("smp.DistributedOptimizer", None, "tensor parallelism replaces the parameters at "
                                  "the partition; wrap the optimizer: optimizer = smp.DistributedOptimizer(optimizer)")
        model, optimizer = preparation.prepare(self.module, wrapper.optimizer if wrapper else None,
                                               loss_fn=self._stage_loss)
        if current.layout.pp > 1:
            model.schedule.scale_grads = self._average
        self.module = model
        if wrapper is not None:
            wrapper.bind(optimizer)
        self.partitioned = True
        for hook in list(self._hooks.values()):
            hook(self, wrapper)

    # -- running a step ------------------------------------------------------------------------------

    def forward(self, *args, **kwargs):
        return _inside("smp.DistributedModel call").forward(self, args, kwargs)

    def backward(self, tensors, grad_tensors=None) -> None:
        micro_batch = _inside("model.backward")
        if not self._training_step:
            raise ValidationError("model.backward", ..., "called in an evaluation step (model.eval() or "
                                  "torch.no_grad()); call model.train() and run the step with gradients enabled")
        micro_batch.backward(tensors, grad_tensors)

    def run_step(self, function: Callable, calls: list[tuple[tuple, dict]], detach: bool) -> list[Any]:
        """The function's return value for each micro-batch (`calls`: its arguments for each)."""
        if not self.partitioned:
            self._partition()
        self._training_step = self.training and torch.is_grad_enabled()
        if state.get("smp.step").layout.pp == 1:
            return self._run_local(function, calls)
        if not detach:
            raise ValidationError("smp.step.detach_outputs", False, "with pipeline stages the outputs come from the "
                                  "last stage, without their graph; leave detach_outputs=True")
        return self._run_pipeline(function, calls)

    def _check_backward(self, micro_batch: _MicroBatch, function: Callable) -> None:
        if self._training_step and not micro_batch.backward_called:
            raise ValidationError("smp.step", function.__qualname__, "ran with the model in training mode and "
                                  "gradients enabled but did not call model.backward(loss); call it, or run "
                                  "evaluation under model.eval() / torch.no_grad()")

    def _run_local(self, function: Callable, calls) -> list[Any]:
        results = []
        for mb, (args, kwargs) in enumerate(calls):
            last = mb == len(calls) - 1
            no_sync = isinstance(self.module, DistributedDataParallel) and not last
            with (self.module.no_sync() if no_sync else contextlib.nullcontext()), \
                    _running(_Local(1 / len(calls) if self._average else 1.0)) as micro_batch:
                results.append(function(*args, **kwargs))
            self._check_backward(micro_batch, function)
        return results

    def _capture(self, function: Callable, args: tuple, kwargs: dict) -> torch.Tensor:
        try:
            with _running(_Capture()):
                function(*args, **kwargs)
        except _Captured as captured:
            return captured.inputs
        raise ValidationError("smp.step", function.__qualname__, "never called the model; call model(inputs) in it")

    def _stage_loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The schedule's loss on the last stage; `target` holds the micro-batch's index."""
        if self._training_step and not self.module.schedule._stage_backward_initialized:
            # torch's pipelining first calls the loss once on placeholder outputs to learn the shapes of
            # the gradients it sends; any scalar of the output serves, the script's function is not run.
            return output.sum()
        function, calls, results = self._pending
        index = int(target[0])
        with _running(_LastStage(output)) as micro_batch:
            results[index] = function(*calls[index][0], **calls[index][1])
        self._check_backward(micro_batch, function)
        return micro_batch.loss if self._training_step else output.new_zeros(())

    def _run_pipeline(self, function: Callable, calls) -> list[Any]:
        pipeline, current = self.module, state.get("smp.step")
        stage = pipeline.stage
        inputs = torch.cat([self._capture(function, *call) for call in calls]) if stage.is_first else None
        targets = torch.arange(len(calls)) if stage.is_last else None
        results: dict[int, Any] = {}  # by micro-batch, filled by _stage_loss on the last stage
        self._pending = (function, calls, results)
        try:
            if self._training_step:
                pipeline.step(inputs, targets)
            else:
                options = {"target": targets, "losses": []} if stage.is_last else {}
                pipeline.schedule.eval(*([inputs] if stage.is_first else []), **options)
        finally:
            self._pending = None
        group, ranks = current.groups[state.CommGroup.PP_GROUP]
        box = [map_tensors([results[mb] for mb in sorted(results)], lambda t: t.detach().cpu())]
        dist.broadcast_object_list(box, src=ranks[-1], group=group, device=process_group.device())
        device = process_group.device()
        return map_tensors(box[0], lambda t: t.to(device))

    # -- parameters and state ------------------------------------------------------------------------

    def _local_module(self) -> nn.Module:
        return _unwrapped(self.module)

    def local_named_parameters(self):
        return self._local_module().named_parameters()

    def local_parameters(self):
        return self._local_module().parameters()

    def local_named_buffers(self):
        return self._local_module().named_buffers()

    def local_buffers(self):
        return self._local_module().buffers()

    def local_named_modules(self):
        return self._local_module().named_modules()

    def local_modules(self):
        return self._local_module().modules()

    def local_state_dict(self) -> dict[str, Any]:
        """This model-parallel rank's parameters and buffers under the user's model's names."""
        return {**get_model_state_dict(self._local_module()), PARTIAL: True}

    def state_dict(self, *args, **kwargs) -> dict[str, Any]:  # noqa: ARG002 - nn.Module's signature
        """The whole model (full tensors), gathered from every model-parallel rank; every rank calls it."""
        if not self.partitioned:
            return self.module.state_dict()
        full = get_model_state_dict(self._local_module(), options=StateDictOptions(full_state_dict=True))
        merged: dict[str, Any] = {}
        for part in state.allgather({k: v.cpu() for k, v in full.items()}, state.CommGroup.PP_GROUP):
            merged.update(part)
        return {**merged, PARTIAL: False}

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True):  # noqa: D417
        """A partial (this rank's) or full state dict; loaded once the model is partitioned, as in SMP."""
        values = {k: v for k, v in state_dict.items() if k != PARTIAL}
        if not self.partitioned:
            self.register_post_partition_hook(lambda model, _optimizer: model.load_state_dict(values, strict))
            return None
        local = self._local_module()
        own = dict(get_model_state_dict(local))
        if strict and state_dict.get(PARTIAL, False):
            missing = sorted(set(own) - set(values))
            if missing:
                raise ValidationError("model.load_state_dict", missing, "are this rank's but not in the partial "
                                      "state dict: load the file this model-parallel rank saved (smp.load)")
        sharded = any(isinstance(v, DTensor) for v in values.values())
        set_model_state_dict(local, {k: v for k, v in values.items() if k in own},
                             options=StateDictOptions(full_state_dict=not sharded, strict=strict))
        return None


class DistributedOptimizer(ParallelOptimizer):
    """The script's optimizer, rebound at the partition to this rank's parameters: a proxy (a torch
    Optimizer, which LR schedulers take) of the optimizer prepare() returned."""

    def __init__(self, optimizer: Optimizer, static_loss_scale: float | None = 1.0, dynamic_loss_scale: bool = False,
                 **dynamic_loss_args: Any) -> None:
        current = state.get("smp.DistributedOptimizer")
        if current.model is not None and current.model.partitioned:
            raise ValidationError("smp.DistributedOptimizer", type(optimizer).__name__, "wrap the optimizer before "
                                  "the first @smp.step call, which partitions the model")
        dynamic_loss_args = {**(dynamic_loss_args.pop("dynamic_loss_args", None) or {}), **dynamic_loss_args}
        for name in dynamic_loss_args:
            if name not in DYNAMIC_LOSS_ARGS:
                raise unknown_name_error("smp.DistributedOptimizer.dynamic_loss_args", name, DYNAMIC_LOSS_ARGS)
        # Effective only with fp16, as in SMP, where shipyard scales the loss with torch's dynamic
        # GradScaler at its defaults (dynamic_loss_scale=True is that).
        custom = dict(dynamic_loss_args)
        if static_loss_scale not in (1.0, None) and not dynamic_loss_scale:
            custom["static_loss_scale"] = static_loss_scale
        if custom and current.config.get("fp16"):
            raise ValidationError("smp.DistributedOptimizer", custom, "fp16 loss scaling here is torch's dynamic "
                                  "GradScaler with its defaults; leave the loss-scale arguments out")
        super().__init__(optimizer)  # no accumulation or scaling of its own: every call passes through
        current.optimizer = self

    def bind(self, optimizer: Optimizer) -> None:
        """The optimizer prepare() made of ours, over this rank's parameters."""
        self.optimizer = optimizer

    def local_state_dict(self) -> dict[str, Any]:
        return {**self.optimizer.state_dict(), PARTIAL: True}

    def state_dict(self) -> dict[str, Any]:
        """Every model-parallel rank's optimizer state, by mp_rank (its parameters are indexed per rank)."""
        return {"mp_ranks": state.allgather(self.optimizer.state_dict(), state.CommGroup.MP_GROUP), PARTIAL: False}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        own = state_dict["mp_ranks"][state.mp_rank()] if "mp_ranks" in state_dict else \
            {k: v for k, v in state_dict.items() if k != PARTIAL}
        model = state.get("smp.DistributedOptimizer.load_state_dict").model
        if model is not None and not model.partitioned:
            model.register_post_partition_hook(lambda _model, optimizer: optimizer.optimizer.load_state_dict(own))
        else:
            self.optimizer.load_state_dict(own)

    def __repr__(self) -> str:
        return f"DistributedOptimizer({self.optimizer!r})"


@contextlib.contextmanager
def tensor_parallelism(enabled: bool = True, **config: Any):
    """SMP marks the modules created here for tensor parallelism; shipyard splits every nn.Linear of the
    model when tensor_parallel_degree > 1 (docs/parallel/tensor-parallel.md), so only the default is served."""
    if not enabled or config:
        raise ValidationError("smp.tensor_parallelism", {"enabled": enabled, **config}, "shipyard splits every "
                              "nn.Linear when tensor_parallel_degree > 1; per-module choices and options are not "
                              "served: call it with no arguments, or set tensor_parallel_degree to 1")
    yield


@contextlib.contextmanager
def model_creation(tensor_parallelism: bool = False, dtype: torch.dtype | None = None, **config: Any):
    """SMP's context for creating the model: its parameters in `dtype` (tensor parallelism as above)."""
    if config:
        raise ValidationError("smp.model_creation", config, "tensor-parallel options are not served; leave them out")
    previous = torch.get_default_dtype()
    if dtype is not None:
        torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)
