"""The debugger's storage format (docs/debugger.md), written by the hook and read by trials:

    <out>/collections/000000000/<worker>_collections.json   collection names and regexes, num_workers
    <out>/tensors/<step:012d>/<worker>.npz                  raw tensors of one step (numpy savez)
    <out>/index/<step//1000:09d>/<step:012d>_<worker>.json  {"step", "mode", "mode_step", "worker",
                                                             "tensors": {name: {"shape", "collections",
                                                             "raw", "reductions": {red: value},
                                                             "histogram": {"edges", "counts"}}}}
    <out>/training_job_end.ts                               written when the hook closes

`step` is the GLOBAL step (it counts the steps of every mode); `mode` is train, eval or predict and
`mode_step` counts that mode's steps from 0. "histogram" is present only for tensors of a collection
with save_histogram=true: HISTOGRAM_BINS equal-width bins over the finite values (`edges` has one more
number than `counts`; numpy.histogram's convention, the last bin closed).

The index file is written last (each file goes to a temporary name, then is renamed), so an index that
exists names a complete step; the sync uploads whole files, and index files after the others, one at a
time in step order, so this holds in the uploaded copy too."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

END_FILE = "training_job_end.ts"
HISTOGRAM_BINS = 30


def histogram(values) -> dict | None:
    """A tensor's histogram as stored in the index (see above), or None when it has no finite value."""
    import numpy as np

    finite = np.asarray(values, dtype=np.float64).ravel()
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return None
    counts, edges = np.histogram(finite, bins=HISTOGRAM_BINS)
    return {"edges": edges.tolist(), "counts": counts.tolist()}


INDEX_DIR = "index"


def index_key(step: int, worker: str) -> str:
    return f"{INDEX_DIR}/{step // 1000:09d}/{step:012d}_{worker}.json"


def tensors_key(step: int, worker: str) -> str:
    return f"tensors/{step:012d}/{worker}.npz"


def collections_key(worker: str) -> str:
    return f"collections/000000000/{worker}_collections.json"


def parse_index_key(key: str) -> tuple[int, str] | None:
    name = key.rsplit("/", 1)[-1]
    if not key.startswith(f"{INDEX_DIR}/") or not name.endswith(".json"):
        return None
    step, _, worker = name[: -len(".json")].partition("_")
    return (int(step), worker) if step.isdigit() else None


def _write_atomic(root: Path, key: str, data: bytes | Callable[[BinaryIO], None]) -> None:
    """Write `data` (bytes, or a function writing to the open file) at root/key, whole or not at all."""
    path = root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    # the temporary file lives outside the synced tree, so a half-written file is never uploaded
    scratch = root.parent / f".{root.name}.tmp"
    scratch.mkdir(exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=scratch)
    with os.fdopen(fd, "wb") as f:
        data(f) if callable(data) else f.write(data)
    os.replace(tmp, path)


class Writer:
    def __init__(self, root: str | Path, worker: str) -> None:
        self.root, self.worker = Path(root), worker
        self.root.mkdir(parents=True, exist_ok=True)

    def write_collections(self, collections: dict, num_workers: int) -> None:
        doc = {"collections": collections, "_meta": {"num_workers": num_workers, "worker": self.worker}}
        _write_atomic(self.root, collections_key(self.worker), json.dumps(doc).encode())

    def write_step(self, step: int, mode: str, mode_step: int, raw: dict, entries: dict) -> None:
        """raw: name -> numpy array; entries: name -> index entry (shape, collections, reductions)."""
        import numpy as np

        if raw:  # straight into the file: a step's tensors can be megabytes, not worth a copy in memory
            _write_atomic(self.root, tensors_key(step, self.worker), lambda f: np.savez(f, **raw))
        doc = {"step": step, "mode": mode, "mode_step": mode_step, "worker": self.worker, "tensors": entries}
        _write_atomic(self.root, index_key(step, self.worker), json.dumps(doc).encode())

    def close(self) -> None:
        _write_atomic(self.root, END_FILE, b"")
