"""Run examples/strategies/parameter_server/src/train.py as a 2-instance `parameter_server` job
(TensorFlow ParameterServerStrategy; a parameter server beside the script on every instance):

    .venv/bin/python examples/strategies/parameter_server/run.py

docs/strategies/tensorflow.md says when to choose it over multi_worker_mirrored_strategy."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/strategies/common.py

from common import run  # noqa: E402

from shipyard.tensorflow import TensorFlow  # noqa: E402


def main() -> None:
    estimator = TensorFlow(entry_point="train.py", source_dir=str(Path(__file__).parent / "src"),
                           instance_count=2, instance_type="local",
                           distribution={"parameter_server": {"enabled": True}},
                           hyperparameters={"steps": 40},
                           environment={"TF_CPP_MIN_LOG_LEVEL": "2"},  # TensorFlow's C++ info logs
                           metric_definitions=[{"Name": "loss", "Regex": r"loss after=([0-9.]+)"}],
                           base_job_name="strategy-ps")
    run(estimator, "parameter_server")


if __name__ == "__main__":
    main()
