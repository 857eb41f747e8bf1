"""The PyTorch debugger hook. `install()` (called by the injected sitecustomize when the job has a hook
config) attaches it to every model without script changes, through torch's global hooks:

- a step is the span between optimizer steps (a global optimizer post-step hook ends it), so the
  forward, loss and backward of step s are saved under step s whatever the script's loop looks like;
- a global forward-pre hook on the outermost module call saves that model's parameters (before this
  step's update, as smdebug does) as `<RootClass>_<param>`, and hooks each parameter's gradient once
  (`gradient/<RootClass>_<param>`);
- a global forward hook saves module outputs `<module>_output_<i>`; a loss module called on its own
  (nn.MSELoss, ...) is a root named by its class, so its output matches the `losses` regex.

Work happens only at save steps: elsewhere each hook checks one boolean. `Hook` is also the explicit
API (register_module, register_loss, record_tensor_value) for scripts that want control."""

from __future__ import annotations

import atexit
import json
import os
import weakref

from shipyard.debugger import collections as coll
from shipyard.debugger.save_config import SaveConfig
from shipyard.debugger.storage import Writer

CONFIG_ENV = "SMDEBUG_CONFIG_FILE_PATH"
_installed = None


def worker_rank() -> tuple[int, int]:
    for rank, size in (("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        if rank in os.environ:
            return int(os.environ[rank]), int(os.environ.get(size, "1"))
    return 0, 1


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


class Hook:
    def __init__(self, out_dir: str, hook_parameters: dict[str, str] | None = None,
                 collection_configs: dict[str, dict[str, str]] | None = None) -> None:
        params = dict(hook_parameters or {})
        self.rank, self.world = worker_rank()
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
        self.step = 0
        self.mode = "train"
        self.due: list = []
        self.pending: dict = {}
        self.names = weakref.WeakKeyDictionary()  # module -> name
        self.hooked_params: set[int] = set()
        self.weights_saved = False
        self._begin_step()

    # -- steps ----------------------------------------------------------------------------------
    def _begin_step(self) -> None:
        self.due = [c for c in self.collections if c.save_config.should_save(self.mode, self.step)]
        self.weights_saved = False

    def end_step(self, *_args, **_kwargs) -> None:
        self._flush()
        self.step += 1
        self._begin_step()

    def set_mode(self, mode: str) -> None:
        self.mode = mode
        self._begin_step()

    def _flush(self) -> None:
        if not self.pending:
            return
        raw, entries = {}, {}
        for name, (tensor, collections) in self.pending.items():
            entry = {"shape": list(tensor.shape), "collections": [c.name for c in collections], "reductions": {}}
            for c in collections:
                for reduction in c.reductions:
                    entry["reductions"][reduction] = _reduce(tensor, reduction)
            if any(c.save_raw_tensor for c in collections):
                raw[name] = tensor.detach().cpu().float().numpy()
            entry["raw"] = name in raw
            entries[name] = entry
        self.writer.write_step(self.step, self.mode, self.step, raw, entries)
        self.pending = {}

    def close(self) -> None:
        self._flush()
        self.writer.close()

    # -- saving ---------------------------------------------------------------------------------
    def _save(self, name: str, tensor) -> None:
        import torch

        if not self.due or not isinstance(tensor, torch.Tensor):
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

    def _name(self, module) -> str:
        name = self.names.get(module)
        if name is None:  # a root not seen before: name it and everything under it
            root = type(module).__name__
            for sub_name, sub in module.named_modules():
                self.names.setdefault(sub, sub_name or root)
            name = self.names[module]
        return name

    def _on_pre_forward(self, module, _inputs) -> None:
        if module in self.names and self.names[module] != type(module).__name__:
            return  # a submodule: only roots take part here
        root = self._name(module)
        for param_name, param in module.named_parameters():
            if param.requires_grad and id(param) not in self.hooked_params:
                self.hooked_params.add(id(param))
                param.register_hook(lambda grad, n=f"gradient/{root}_{param_name}": self._save(n, grad))
        if self.due and not self.weights_saved:
            self.weights_saved = True
            for param_name, param in module.named_parameters():
                self._save(f"{root}_{param_name}", param.data)

    def _on_forward(self, module, _inputs, outputs) -> None:
        if not self.due:
            return
        name = self._name(module)
        for i, out in enumerate(outputs if isinstance(outputs, (tuple, list)) else (outputs,)):
            self._save(f"{name}_output_{i}", out)

    def register_module(self, module) -> None:
        """Explicit API: hook this model (zero-code-change jobs have every module hooked already)."""
        module.register_forward_pre_hook(self._on_pre_forward)
        module.apply(lambda m: m.register_forward_hook(self._on_forward))

    def register_loss(self, loss_module) -> None:
        loss_module.register_forward_hook(self._on_forward)

    def install_global(self) -> None:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_module_forward_pre_hook(self._on_pre_forward)
        register_module_forward_hook(self._on_forward)
        register_optimizer_step_post_hook(self.end_step)
        atexit.register(self.close)

    @classmethod
    def create_from_json_file(cls, path: str | None = None) -> Hook:
        with open(path or os.environ[CONFIG_ENV]) as f:
            doc = json.load(f)
        return cls(doc.get("LocalPath") or "/opt/ml/output/tensors", doc.get("HookParameters"),
                   {c["CollectionName"]: c.get("CollectionParameters") or {} for c in
                    doc.get("CollectionConfigurations") or ()})


def install() -> Hook | None:
    """Zero-code-change capture for this process (rank 0 only unless include_workers=all)."""
    global _installed
    if _installed is None:
        with open(os.environ[CONFIG_ENV]) as f:
            params = json.load(f).get("HookParameters") or {}
        if params.get("include_workers", "one") != "all" and worker_rank()[0] != 0:
            return None
        _installed = Hook.create_from_json_file()
        _installed.install_global()
    return _installed
