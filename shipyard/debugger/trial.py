"""Reading saved tensors (smdebug's trial API) from a local directory or any URI, while the job runs:
each call to steps() or tensor_names() lists what is new. `trial(job_name_or_path)` takes a job name
(its <output_path>/<job>/debug-output/) or a path/URI."""

from __future__ import annotations

import io
import json
import re

from shipyard.debugger import storage
from shipyard.storage.uri import filesystem, join


class TensorUnavailable(KeyError):
    pass


class Tensor:
    def __init__(self, trial: Trial, name: str) -> None:
        self.trial, self.name = trial, name

    def steps(self) -> list[int]:
        return sorted({s for (s, _w), doc in self.trial._index.items() if self.name in doc["tensors"]})

    def workers(self, step: int) -> list[str]:
        return sorted(w for (s, w), doc in self.trial._index.items() if s == step and self.name in doc["tensors"])

    def value(self, step: int, worker: str | None = None):
        worker = worker or self._first_worker(step)
        entry = self.trial._index[(step, worker)]["tensors"][self.name]
        if not entry.get("raw"):
            raise TensorUnavailable(f"{self.name} at step {step} was saved as reductions only")
        return self.trial._arrays(step, worker)[self.name]

    def reduction_value(self, step: int, reduction_name: str, abs: bool = False, worker: str | None = None):
        worker = worker or self._first_worker(step)
        key = f"abs_{reduction_name}" if abs else reduction_name
        reductions = self.trial._index[(step, worker)]["tensors"][self.name]["reductions"]
        if key in reductions:
            return reductions[key]
        import numpy as np

        value = np.abs(self.value(step, worker)) if abs else self.value(step, worker)
        return float({"l1": lambda v: np.abs(v).sum(), "l2": np.linalg.norm, "variance": np.var}
                     .get(reduction_name, getattr(np, reduction_name))(value))

    def _first_worker(self, step: int) -> str:
        workers = self.workers(step)
        if not workers:
            raise TensorUnavailable(f"{self.name} has no value at step {step}")
        return workers[0]


class Trial:
    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.fs, self.root = filesystem(uri)
        self._index: dict[tuple[int, str], dict] = {}
        self._npz: dict[tuple[int, str], dict] = {}
        self._collections: dict[str, list[re.Pattern]] | None = None

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
                    self._index[parsed] = json.load(f)

    def loaded_steps(self) -> list[int]:
        """The steps already read, without listing storage again (for callers that refresh themselves)."""
        return sorted({s for s, _w in self._index})

    def steps(self) -> list[int]:
        self.refresh()
        return self.loaded_steps()

    def workers(self) -> list[str]:
        self.refresh()
        return sorted({w for _s, w in self._index})

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
                     regex: str | None = None) -> list[str]:
        if step is None:
            self.refresh()
        docs = [d for (s, _w), d in self._index.items() if step is None or s == step]
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


def debug_output_uri(output_path: str, job_name: str, hook_path: str | None = None) -> str:
    return join(hook_path or output_path, job_name, "debug-output")


def trial(job_name_or_path: str) -> Trial:
    """A trial over a job's tensors (by job name) or over a directory/URI holding them."""
    from shipyard.storage.uri import exists

    if "/" not in job_name_or_path and not exists(job_name_or_path):
        from shipyard.store.db import Store

        spec = Store().get_job(job_name_or_path).spec
        hook = spec.debugger_hook_config
        return Trial(debug_output_uri(spec.output_path, spec.job_name, hook.s3_output_path if hook else None))
    return Trial(job_name_or_path)
