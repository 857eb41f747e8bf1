"""Run examples/strategies/multi_worker_mirrored/src/train.py as a 2-instance
`multi_worker_mirrored_strategy` job (TensorFlow synchronous data parallel across instances):

    .venv/bin/python examples/strategies/multi_worker_mirrored/run.py

docs/strategies/tensorflow.md says when to choose it over parameter_server."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/strategies/common.py

from common import run  # noqa: E402

from shipyard.tensorflow import TensorFlow  # noqa: E402


def main() -> None:
    estimator = TensorFlow(entry_point="train.py", source_dir=str(Path(__file__).parent / "src"),
                           instance_count=2, instance_type="local",
                           distribution={"multi_worker_mirrored_strategy": {"enabled": True}},
                           hyperparameters={"epochs": 3},
                           environment={"TF_CPP_MIN_LOG_LEVEL": "2"},  # TensorFlow's C++ info logs
                           metric_definitions=[{"Name": "loss", "Regex": r"loss=([0-9.]+)"}],
                           base_job_name="strategy-mwms")
    run(estimator, "multi_worker_mirrored")


if __name__ == "__main__":
    main()
