"""What a trial is: the tuning job's training job with the tuned values set. Its name is SageMaker's
(`TUNING-NNN-xxxxxxxx`) and follows from the tuning job's name and the trial's place, so a tuning
process that starts a trial again after a crash finds the job it may already have created. The script
gets the tuned values encoded as the estimator sends hyperparameters, and `_tuning_objective_metric`,
as the service adds it. Checkpoints are kept per configuration (SageMaker gives every trial the same
`checkpoint_s3_uri`, so trials restore each other's): Hyperband's promoted configurations resume from
them."""

from __future__ import annotations

import hashlib
from typing import Any

from shipyard.contract import hyperparameters as hp
from shipyard.spec.build import build
from shipyard.spec.job import JobSpec
from shipyard.spec.tuning import OBJECTIVE_HYPERPARAMETER, TrainingDefinition, TuningSpec
from shipyard.storage.uri import join


def job_name(tuning_job: str, seq: int) -> str:
    digest = hashlib.sha1(f"{tuning_job}/{seq}".encode()).hexdigest()[:8]
    return f"{tuning_job}-{seq:03d}-{digest}"


def hyperparameters(definition: TrainingDefinition, values: dict[str, Any]) -> dict[str, str]:
    """Static and tuned, as the trial's script gets them (without the sagemaker_* ones)."""
    static = {k: v for k, v in definition.training.hyperparameters.items() if not k.startswith("sagemaker_")}
    return {**static, **hp.ENCODINGS[definition.encoding](values),
            OBJECTIVE_HYPERPARAMETER: definition.objective_metric_name}


def checkpoint_uri(spec: TuningSpec, definition: TrainingDefinition, first_job: str) -> str | None:
    """Where a configuration's checkpoints live: under the estimator's checkpoint_s3_uri, or for
    Hyperband (which resumes from them) under the output path; keyed by its first job's name."""
    base = definition.training.checkpoint_s3_uri
    if base is None and spec.strategy == "Hyperband":
        base = join(definition.training.output_path, spec.tuning_job_name, "checkpoints")
    return join(base, first_job) if base else None


def trial_spec(definition: TrainingDefinition, name: str, values: dict[str, Any], checkpoints: str | None,
               budget: float | None = None) -> JobSpec:
    """`budget`: what the tuning job's max_cost leaves; the trial's own max_cost is at most that."""
    training = definition.training
    if budget is not None:
        budget = min(budget, training.max_cost) if training.max_cost is not None else budget
    return build(JobSpec, "training", **{
        **training.model_dump(), "job_name": name, "checkpoint_s3_uri": checkpoints,
        "max_cost": training.max_cost if budget is None else max(budget, 1e-6),
        "hyperparameters": {**training.hyperparameters, **hyperparameters(definition, values),
                            **hp.encode_json({"sagemaker_job_name": name})},
    })
