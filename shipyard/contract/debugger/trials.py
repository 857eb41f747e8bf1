"""Reading saved tensors (smdebug's trial API) from a local directory or any URI, while the job runs:
each call to steps() or tensor_names() lists what is new. The reader of the format the hook writes
(storage.py beside it), so the rules, the SDK and the smdebug library served to jobs share it;
shipyard.rules.debugger.trials.trial() also finds a job's output by the job's name."""

from __future__ import annotations

import copy
import io
import json
import re

from shipyard.contract.debugger import modes, storage
from shipyard.storage.uri import filesystem, join


class TensorUnavailable(KeyError):
    pass


class Tensor:
    """One tensor's values. A `step` is a GLOBAL step, or that mode's mode step when `mode` is given."""

    def __init__(self, trial: Trial, name: str) -> None:
        self.trial, self.name = trial, name

    def _docs(self):
        return ((s, w, doc) for (s, w), doc in self.trial._records() if self.name in doc["tensors"])

    def steps(self, mode=None) -> list[int]:
        if mode is None:
            return sorted({s for s, _w, _doc in self._docs()})
        mode = modes.parse(mode)
        return sorted({doc["mode_step"] for _s, _w, doc in self._docs() if doc["mode"] == mode})

    def workers(self, step: int, mode=None) -> list[str]:
        step = self.trial._global(step, mode)
        return sorted(w for s, w, _doc in self._docs() if s == step)

    def _entry(self, step: int, mode, worker: str | None) -> tuple[int, str, dict]:
        step = self.trial._global(step, mode)
        if worker is None:
            workers = self.workers(step)
            if not workers:
                raise TensorUnavailable(f"{self.name} has no value at step {step}")
            worker = workers[0]
        doc = self.trial._index.get((step, worker))
        if doc is None or self.name not in doc["tensors"]:
            raise TensorUnavailable(f"{self.name} has no value at step {step} on {worker}")
        return step, worker, doc["tensors"][self.name]

    def value(self, step: int, mode=None, worker: str | None = None):
        step, worker, entry = self._entry(step, mode, worker)
        if not entry.get("raw"):
            raise TensorUnavailable(f"{self.name} at step {step} was saved as reductions only")
        return self.trial._arrays(step, worker)[self.name]

    def reduction_value(self, step: int, reduction_name: str, abs: bool = False, mode=None,
                        worker: str | None = None):
        step, worker, entry = self._entry(step, mode, worker)
        key = f"abs_{reduction_name}" if abs else reduction_name
        if key in entry["reductions"]:
            return entry["reductions"][key]
        import numpy as np

        value = np.abs(self.value(step, worker=worker)) if abs else self.value(step, worker=worker)
        named = {"l1": lambda v: np.abs(v).sum(), "l2": np.linalg.norm, "variance": np.var}
        reduce = named.get(reduction_name) or getattr(np, reduction_name)
        return float(reduce(value))

    def reduction_values(self, step: int, mode=None, worker: str | None = None) -> dict[str, float]:
        """Every reduction saved for this tensor at this step ({"mean": ..., "abs_max": ...})."""
        return dict(self._entry(step, mode, worker)[2]["reductions"])

    def histogram(self, step: int, mode=None, worker: str | None = None) -> tuple[list[float], list[int]]:
        """(edges, counts) as the hook stored them (save_histogram=true), else computed from the raw value
        the same way (storage.histogram); TensorUnavailable when there is neither."""
        step, worker, entry = self._entry(step, mode, worker)
        found = entry.get("histogram") if "histogram" in entry else storage.histogram(self.value(step, worker=worker))
        if found is None:
            raise TensorUnavailable(f"{self.name} at step {step} has no finite value to histogram")
        return found["edges"], found["counts"]


class Trial:
    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.fs, self.root = filesystem(uri)
        self._index: dict[tuple[int, str], dict] = {}
        self._by_mode: dict[tuple[str, int], int] = {}  # (mode, mode step) -> global step
        self._npz: dict[tuple[int, str], dict] = {}
        self._collections: dict[str, list[re.Pattern]] | None = None
        self.worker: str | None = None  # set on a view of one worker's tensors (for_worker)

    def for_worker(self, worker: str) -> Trial:
        """A view of this trial that sees one worker's tensors only: what a rule judging each rank on its
        own is given. It shares what has been read, and refreshing either refreshes both."""
        view = copy.copy(self)
        view.worker = worker
        return view

    def _records(self):
        """(GLOBAL step, worker) -> index document pairs, of this view's worker only when it has one."""
        return ((key, doc) for key, doc in self._index.items() if self.worker in (None, key[1]))

    def refresh(self) -> None:
        """Read index files not read yet."""
        try:
            found = self.fs.find(join(self.root, "index"))
        except FileNotFoundError:
            return
        prefix = self.root.rstrip("/") + "/"
        for path in found:
            parsed = storage.parse_index_key(path[len(prefix):]) if path.startswith(prefix) else None
            if parsed and parsed not in self._index:
                with self.fs.open(path, "rb") as f:
                    doc = self._index[parsed] = json.load(f)
                self._by_mode[(doc["mode"], doc["mode_step"])] = parsed[0]

    def loaded_steps(self, mode=None) -> list[int]:
        """The steps already read, without listing storage again (for callers that refresh themselves):
        GLOBAL steps, or that mode's mode steps."""
        if mode is None:
            return sorted({s for (s, _w), _doc in self._records()})
        mode = modes.parse(mode)
        return sorted({doc["mode_step"] for _key, doc in self._records() if doc["mode"] == mode})

    def steps(self, mode=None) -> list[int]:
        self.refresh()
        return self.loaded_steps(mode)

    def mode_of(self, global_step: int) -> tuple[str, int]:
        """(mode, mode step) of a GLOBAL step."""
        for attempt in range(2):
            for (s, _w), doc in self._index.items():
                if s == global_step:
                    return doc["mode"], doc["mode_step"]
            if attempt == 0:
                self.refresh()
        raise TensorUnavailable(f"no step {global_step} saved")

    def global_step(self, mode, mode_step: int) -> int:
        key = (modes.parse(mode), mode_step)
        if key not in self._by_mode:
            self.refresh()
        if key not in self._by_mode:
            raise TensorUnavailable(f"no {key[0]} step {mode_step} saved")
        return self._by_mode[key]

    def _global(self, step: int, mode) -> int:
        return step if mode is None else self.global_step(mode, step)

    def records(self) -> list[tuple[int, str, dict]]:
        """Every saved (GLOBAL step, worker, index document) in step order, as storage.py describes it."""
        self.refresh()
        return [(s, w, doc) for (s, w), doc in sorted(self._records())]

    def workers(self) -> list[str]:
        self.refresh()
        return self.loaded_workers()

    def loaded_workers(self) -> list[str]:
        """The workers of the steps already read (for callers that refresh themselves)."""
        return sorted({w for (_s, w), _doc in self._records()})

    def ended(self) -> bool:
        return self.fs.exists(join(self.root, storage.END_FILE))

    def collections(self) -> dict[str, list[re.Pattern]]:
        if self._collections is None:
            found: dict[str, list[re.Pattern]] = {}
            try:
                files = self.fs.glob(join(self.root, "collections", "*", "*_collections.json"))
            except FileNotFoundError:
                files = []
            for path in files:
                with self.fs.open(path, "rb") as f:
                    for name, c in json.load(f)["collections"].items():
                        found.setdefault(name, [re.compile(p) for p in c["include_regex"]])
            if not found:
                return {}
            self._collections = found
        return self._collections

    def tensor_names(self, step: int | None = None, collection: str | None = None,
                     regex: str | None = None, mode=None) -> list[str]:
        """Names saved at a step (GLOBAL, or a mode step with `mode`), or at any step of the mode, or ever."""
        if step is None:
            self.refresh()
            mode = mode and modes.parse(mode)
            docs = [d for _key, d in self._records() if mode is None or d["mode"] == mode]
        else:
            step = self._global(step, mode)
            docs = [d for (s, _w), d in self._records() if s == step]
        return self._names(docs, collection, regex)

    @staticmethod
    def _names(docs, collection: str | None, regex: str | None) -> list[str]:
        names: set[str] = set()
        for doc in docs:
            for name, entry in doc["tensors"].items():
                if collection is not None and collection not in entry["collections"]:
                    continue
                if regex is not None and not re.search(regex, name):
                    continue
                names.add(name)
        return sorted(names)

    def tensor(self, name: str) -> Tensor:
        return Tensor(self, name)

    def _arrays(self, step: int, worker: str) -> dict:
        key = (step, worker)
        if key not in self._npz:
            import numpy as np

            with self.fs.open(join(self.root, storage.tensors_key(step, worker)), "rb") as f:
                data = np.load(io.BytesIO(f.read()))
                self._npz[key] = {k: data[k] for k in data.files}
            if len(self._npz) > 8:  # keep memory flat over long trials
                self._npz.pop(next(iter(self._npz)))
        return self._npz[key]

