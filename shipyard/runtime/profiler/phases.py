"""The phases of a PyTorch step, as SageMaker names them, from PyTorch's global module hooks and the
heartbeat's optimizer hooks, without changes to the script:

- "Forward": a call of a root module with parameters, a model (the outermost module call: its
  submodules' calls are inside it); a loss module called on its own is no model: its call is part of
  the backward phase and never starts a step;
- "Backward(post-forward)": from the end of the step's last forward to the start of optimizer.step(). An
  approximation: it holds the loss, zero_grad and backward (with gradient accumulation, only the last
  micro-batch's backward);
- "Optimizer": optimizer.step();
- EVAL steps: a forward of a model in eval mode is one EVAL step ("Step:ModeKeys.EVAL", see
  steps.StepRecorder.eval_step). Models called in training mode drive steps and modes: a model never
  trained here (a distillation teacher kept in eval mode) called inside a TRAIN step is a Forward of that
  step, not an EVAL step; with no model trained yet (inference), every eval-mode forward is a step.

The module hooks are registered only while the step timeline records, until step 1 starts (to see it
start) and during Python-profiled steps (whose profiles split at the end of the step's first TRAIN
forward, SageMaker's forwardpassend, reported to the recorder): otherwise a module call costs nothing
more and an optimizer step one check."""

from __future__ import annotations

import time
import weakref

FORWARD, BACKWARD, OPTIMIZER = "Forward", "Backward(post-forward)", "Optimizer"


class Phases:
    def __init__(self, recorder) -> None:
        self.r = recorder
        self.wanted = False  # whether the module hooks should be on
        self.attached = False  # torch.nn is imported: the hooks can be registered
        self.handles: tuple | None = None
        self.depth = 0  # module calls in progress; 1 is the root's
        self.forward_start = 0.0
        self.forward_end = 0.0  # end of the current TRAIN step's last forward; 0: none yet
        self.optimizer_start = 0.0
        self.root = None  # weakref to the latest model
        self.in_model = False  # the root call in progress is a model's
        self.trained = weakref.WeakSet()  # models called in training mode
        self.models = weakref.WeakKeyDictionary()  # root module -> whether it has parameters

    # -- the module hooks, on while wanted ---------------------------------------------------------
    def attach(self) -> None:
        """torch.nn is imported (called by the import hook)."""
        self.attached = True
        self.set_active(self.wanted)

    def detach(self) -> None:
        self.set_active(False)
        self.attached = False

    def set_active(self, on: bool) -> None:
        self.wanted = on
        if not self.attached or on == (self.handles is not None):
            return
        if on:
            from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

            self.depth = 0  # turned on between module calls (off may come from inside _pre)
            self.handles = (register_module_forward_pre_hook(self._pre),
                            register_module_forward_hook(self._post, always_call=True))
        else:
            for handle in self.handles:
                handle.remove()
            self.handles = None

    def _pre(self, module, _args) -> None:
        self.depth += 1
        if self.depth > 1:
            return
        self.in_model = self.models.get(module)
        if self.in_model is None:
            self.in_model = self.models[module] = next(module.parameters(), None) is not None
        if not self.in_model:
            return
        self.root = weakref.ref(module)
        if module.training:
            self.trained.add(module)
            if self.r.started <= self.r.step_num:
                self.r.step_starts(time.time())
        self.forward_start = time.time()  # after step 1's profilers started

    def _post(self, module, _args, _output) -> None:
        self.depth -= 1
        if self.depth > 0 or not self.in_model:
            return
        now = time.time()
        if self.is_eval(module):
            self.r.eval_step(self.forward_start, now)
            return
        self.forward_end = now
        self.r.forward_ends(now)
        if self.r.timeline_on:
            self.r.timeline.add(FORWARD, self.forward_start, now, self.r.step_num + 1, mode="TRAIN")

    def is_eval(self, module) -> bool:
        return not module.training and (module in self.trained or not self.trained)

    def mode(self) -> str:
        """The mode of the latest root module's next call, by its training flag now: EVAL after
        model.eval(), so the batches an evaluation loop fetches count for EVAL steps."""
        root = self.root() if self.root is not None else None
        return "EVAL" if root is not None and self.is_eval(root) else "TRAIN"

    # -- the optimizer, through the heartbeat's hooks -----------------------------------------------
    def before_optimizer(self) -> None:
        if self.handles is None:
            return
        now = self.optimizer_start = time.time()
        if self.forward_end and self.r.timeline_on:
            self.r.timeline.add(BACKWARD, self.forward_end, now, self.r.step_num + 1)
        self.forward_end = 0.0

    def optimizer_done(self, step: int, now: float) -> None:
        if self.optimizer_start and self.r.timeline_on:
            self.r.timeline.add(OPTIMIZER, self.optimizer_start, now, step)
        self.optimizer_start = 0.0
