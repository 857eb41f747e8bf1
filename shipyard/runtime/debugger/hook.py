"""The PyTorch debugger hook. `install()` (called by the injected sitecustomize when the job has a hook
config) attaches it to every model without script changes, through torch's global hooks:

- a global forward-pre hook sees each outermost module call. A root with parameters is a model; the
  models called in training mode drive the steps (see `trained`). Its parameters are saved (before this step's update, as smdebug does)
  as `<RootClass>_<param>`, and each parameter's gradient is hooked once (`gradient/<RootClass>_<param>`);
- a global forward hook saves module inputs and outputs, `<module>_input_<i>` and `<module>_output_<i>`;
  a loss module called on its own (nn.MSELoss, ...) is a root named by its class, so its output matches
  the `losses` regex;
- modes and steps, smdebug's semantics: the GLOBAL step counts every step of every mode, and each mode
  has its own mode step from 0. The mode is the model's `training` flag at its forward-pre hook
  (model.eval() -> eval) until the script calls `hook.set_mode(...)`, which then decides. A TRAIN step is
  the span between optimizer steps (a global optimizer post-step hook ends it), so the forward, loss and
  backward of step s are saved under step s whatever the loop looks like; an EVAL or PREDICT step is one
  forward call of the model (there is no optimizer step in evaluation). SaveConfig is per mode, on the
  mode step.

Work happens only at save steps: elsewhere each hook checks one boolean (the model's forward-pre hook
also compares its training flag with the mode). `Hook` is also the explicit API (register_module,
register_loss, record_tensor_value, set_mode, end_step) for scripts that want control."""

from __future__ import annotations

import atexit
import json
import os
import sys
import weakref

from shipyard.contract.debugger import collections as coll
from shipyard.contract.debugger import modes
from shipyard.contract.debugger.save_config import SaveConfig
from shipyard.contract.debugger.storage import Writer, histogram
from shipyard.contract.rank import process_rank
from shipyard.runtime.import_hooks import after_import

CONFIG_ENV = "SMDEBUG_CONFIG_FILE_PATH"
_installed = None


def _reduce(tensor, name: str):
    import torch

    t = tensor.detach().float()
    if name.startswith("abs_"):
        t, name = t.abs(), name[4:]
    if name == "l1":
        return float(t.abs().sum())
    if name == "l2":
        return float(torch.linalg.vector_norm(t))
    if name == "variance":
        return float(t.var()) if t.numel() > 1 else 0.0
    if name == "std":
        return float(t.std()) if t.numel() > 1 else 0.0
    return float(getattr(t, name)())


# Roles of modules seen by the forward-pre hook: inside a model, a root without parameters (a loss), a model.
SUB, ROOT, MODEL = 0, 1, 2
# What save_scalar saves into: raw, at any step (its name is the caller's, not matched by regex).
SCALARS = coll.Collection(name="scalars", regex=(), save_config=SaveConfig.from_parameters({}))
# Wrappers whose `.module` is the user's model: tensors are named after the model, as if unwrapped, so
# names (and the rules' regexes) do not change when a script adds DDP.
WRAPPERS = ("DistributedDataParallel", "DataParallel", "FullyShardedDataParallel")


def _unwrapped(module) -> tuple[str, str]:
    """(the name of a root's tensors, the prefix to drop from its submodules' and parameters' names)."""
    inner = getattr(module, "module", None) if type(module).__name__ in WRAPPERS else None
    return (type(inner).__name__, "module") if inner is not None else (type(module).__name__, "")


class Hook:
    def __init__(self, out_dir: str, hook_parameters: dict[str, str] | None = None,
                 collection_configs: dict[str, dict[str, str]] | None = None) -> None:
        params = dict(hook_parameters or {})
        self.rank, self.world = process_rank() or (0, 1)
        self.worker = f"worker_{self.rank}"
        save = SaveConfig.from_parameters(params)
        reductions = coll.parse_reductions(params.get("reductions", ""))
        raw = params.get("save_raw_tensor", "false").lower() == "true"
        wanted = dict(collection_configs or {})
        if params.get("save_all", "false").lower() == "true":
            wanted.setdefault("all", {})
        if params.get("include_regex"):
            wanted.setdefault("default", {"include_regex": params["include_regex"]})
        for name in coll.ALWAYS_SAVED:
            wanted.setdefault(name, {})
        self.collections = [coll.build(n, p, save, reductions, raw) for n, p in wanted.items()]
        self.writer = Writer(out_dir, self.worker)
        self.writer.write_collections(
            {c.name: {"include_regex": [p.pattern for p in c.regex]} for c in self.collections}, self.world)
        self.mode = modes.TRAIN.value
        self.auto_mode = True  # the model's training flag decides, until set_mode is called
        self.step = 0  # the GLOBAL step
        self.mode_steps = dict.fromkeys(modes.MODES, 0)
        self.step_used = False  # the model was called in the current step
        self.due: list = []
        self.pending: dict = {}
        self.names = weakref.WeakKeyDictionary()  # module -> name
        self.roles = weakref.WeakKeyDictionary()  # module -> SUB | ROOT | MODEL
        # Models called in training mode drive steps and modes (a model only ever in eval mode, such as a
        # distillation teacher, does not, once one has trained); with none, every model does (inference).
        self.trained = weakref.WeakSet()
        self.weights_saved: set[int] = set()  # ids of the models whose parameters this step saved
        # Hooks that only save are attached for save steps only, so other steps pay one pre-hook call per
        # module: the global forward hook (zero-code-change capture) and each parameter's gradient hook.
        self.forward_hook = None  # the handle while attached; None when not installed globally or detached
        self.global_forward = False
        self.gradient_hooks: list = []
        self._begin_step()

    # -- steps and modes --------------------------------------------------------------------------
    @property
    def mode_step(self) -> int:
        return self.mode_steps[self.mode]

    def _begin_step(self) -> None:
        self.due = [c for c in self.collections if c.save_config.should_save(self.mode, self.mode_step)]
        self.weights_saved = set()
        if self.global_forward and bool(self.due) != (self.forward_hook is not None):
            if self.due:
                from torch.nn.modules.module import register_module_forward_hook

                self.forward_hook = register_module_forward_hook(self._on_forward)
            else:
                self.forward_hook.remove()
                self.forward_hook = None

    def _advance(self) -> None:
        for handle in self.gradient_hooks:
            handle.remove()
        self.gradient_hooks = []
        self._flush()
        self.step += 1
        self.mode_steps[self.mode] += 1
        self.step_used = False
        self._begin_step()

    def end_step(self, *_args, **_kwargs) -> None:
        """End the current step (the optimizer post-step hook in zero-code-change jobs)."""
        self._advance()

    def _switch(self, mode: str) -> None:
        if self.step_used or self.pending:  # the step under way belongs to the old mode
            self._advance()
        self.mode = mode
        self._begin_step()

    def set_mode(self, mode) -> None:
        """Explicit API (smdebug's hook.set_mode(modes.EVAL)): from now on the mode is what is set here."""
        self.auto_mode = False
        mode = modes.parse(mode)
        if mode != self.mode:
            self._switch(mode)

    def _on_model_call(self, module) -> None:
        if self.auto_mode:
            mode = "train" if module.training else "eval"
            if mode != self.mode:
                self._switch(mode)
        if self.mode != "train" and self.step_used:
            self._advance()  # an eval or predict step is one forward call of the model
        self.step_used = True

    def _flush(self) -> None:
        if not self.pending:
            return
        raw, entries = {}, {}
        for name, (tensor, collections) in self.pending.items():
            entry = {"shape": list(tensor.shape), "collections": [c.name for c in collections], "reductions": {}}
            for c in collections:
                for reduction in c.reductions:
                    entry["reductions"][reduction] = _reduce(tensor, reduction)
            values = None
            if any(c.save_raw_tensor for c in collections):
                values = raw[name] = tensor.detach().cpu().float().numpy()
            if any(c.save_histogram for c in collections):
                values = tensor.detach().cpu().float().numpy() if values is None else values
                entry["histogram"] = histogram(values)
            entry["raw"] = name in raw
            entries[name] = entry
        self.writer.write_step(self.step, self.mode, self.mode_step, raw, entries)
        self.pending = {}

    def close(self) -> None:
        self._flush()
        self.writer.close()

    # -- saving ---------------------------------------------------------------------------------
    def _save(self, name: str, tensor) -> None:
        if not self.due:
            return
        import torch

        if not isinstance(tensor, torch.Tensor):
            return
        matched = [c for c in self.due if c.matches(name)]
        if matched:
            unique, i = name, 1
            while unique in self.pending:  # a module called twice in one step
                unique, i = f"{name}_{i}", i + 1
            self.pending[unique] = (tensor.detach().clone(), matched)

    def record_tensor_value(self, tensor_name: str, tensor_value) -> None:
        """Save a tensor computed outside modules (a functional loss), at save steps."""
        self._save(tensor_name, tensor_value)

    def _discover(self, module) -> int:
        """A root module not seen before: name it and everything under it."""
        root, prefix = _unwrapped(module)
        for sub_name, sub in module.named_modules():
            # Inside this root from now on, even a module called on its own before (a model wrapped in
            # DDP after a first call): one model, its tensors saved once.
            self.names[sub] = "" if prefix and sub is module else _strip(sub_name, prefix) or root
            self.roles[sub] = SUB
        self.roles[module] = MODEL if any(True for _ in module.parameters()) else ROOT
        return self.roles[module]

    def _parameters(self, module):
        """(tensor name, parameter) of a model, named after its root as smdebug does."""
        root, prefix = _unwrapped(module)
        for param_name, param in module.named_parameters():
            yield f"{root}_{_strip(param_name, prefix)}", param

    def _on_pre_forward(self, module, _inputs) -> None:
        role = self.roles.get(module)
        if role is None:
            role = self._discover(module)
        if role != MODEL:
            return
        if module.training:
            self.trained.add(module)
            self._on_model_call(module)
        elif module in self.trained or not self.trained:
            self._on_model_call(module)
        if self.due and id(module) not in self.weights_saved:
            self.weights_saved.add(id(module))
            for name, param in self._parameters(module):
                self._save(name, param.data)
                if param.requires_grad:
                    self.gradient_hooks.append(
                        param.register_hook(lambda grad, n=f"gradient/{name}": self._save(n, grad)))

    def _on_forward(self, module, inputs, outputs) -> None:
        if not self.due:
            return
        name = self.names.get(module, type(module).__name__)
        if not name:
            return  # a DDP-style wrapper: its model's own call is saved
        for i, value in enumerate(inputs):
            self._save(f"{name}_input_{i}", value)
        for i, out in enumerate(outputs if isinstance(outputs, (tuple, list)) else (outputs,)):
            self._save(f"{name}_output_{i}", out)

    def register_module(self, module) -> None:
        """Explicit API: hook this model (zero-code-change jobs have every module hooked already)."""
        module.register_forward_pre_hook(self._on_pre_forward)
        module.apply(lambda m: m.register_forward_hook(self._on_forward))

    def register_loss(self, loss_module) -> None:
        loss_module.register_forward_pre_hook(self._on_pre_forward)
        loss_module.register_forward_hook(self._on_forward)

    def save_scalar(self, name: str, value) -> None:
        """Save a one-element value under `name` at the current step, whatever the save config (smdebug's
        save_scalar: the caller gives the full name)."""
        import torch

        tensor = torch.as_tensor(value).detach()
        if tensor.numel() != 1:
            raise ValueError(f"{name} has {tensor.numel()} elements; a scalar has one")
        self.pending[name] = (tensor.float().reshape(1), [SCALARS])

    def install_steps(self) -> None:
        """TRAIN steps end at each optimizer step, and the hook closes at exit: a hook of registered modules
        (smdebug's explicit API) keeps steps as the global hook does."""
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(self.end_step)
        atexit.register(self.close)

    def install_global(self) -> None:
        from torch.nn.modules.module import register_module_forward_pre_hook

        register_module_forward_pre_hook(self._on_pre_forward)
        self.global_forward = True
        self._begin_step()  # attaches the forward hook if this step saves
        self.install_steps()

    @classmethod
    def create_from_json_file(cls, path: str | None = None) -> Hook:
        with open(path or os.environ[CONFIG_ENV]) as f:
            doc = json.load(f)
        return cls(doc.get("LocalPath") or "/opt/ml/output/tensors", doc.get("HookParameters"),
                   {c["CollectionName"]: c.get("CollectionParameters") or {} for c in
                    doc.get("CollectionConfigurations") or ()})


def _strip(name: str, prefix: str) -> str:
    if not prefix:
        return name
    return "" if name == prefix else name.removeprefix(prefix + ".")


def saves_here(hook_parameters: dict[str, str]) -> bool:
    """Whether this process saves tensors: rank 0 only unless include_workers=all."""
    # torchrun's own process (python -m torch.distributed.run) runs the sitecustomize too; it has the launch
    # plan's MASTER_ADDR but, unlike the workers it starts, no rank: it is not worker_0.
    if "MASTER_ADDR" in os.environ and process_rank() is None:
        return False
    return hook_parameters.get("include_workers", "one") == "all" or (process_rank() or (0, 1))[0] == 0


def install() -> None:
    """Zero-code-change capture, from the moment the process imports torch: a process that never does (a
    TensorFlow script, the XGBoost algorithm) neither pays torch's import nor saves through this hook."""
    after_import("torch", job_hook)


def job_hook() -> Hook | None:
    """The job's hook in this process (rank 0 only unless include_workers=all), made on the first call."""
    global _installed
    if _installed is None:
        with open(os.environ[CONFIG_ENV]) as f:
            params = json.load(f).get("HookParameters") or {}
        if not saves_here(params):
            return None
        _installed = Hook.create_from_json_file()
        _installed.install_global()
        print(f"shipyard: debugger hook saving tensors as {_installed.worker}", file=sys.stderr)
    return _installed
