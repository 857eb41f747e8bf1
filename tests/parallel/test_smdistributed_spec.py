"""`distribution={"smdistributed": ...}` validated as SageMaker's SDK validates it, and the
hyperparameters it emits (spec 2.1, 2.7)."""

from __future__ import annotations

import pytest

from shipyard.errors import ValidationError
from shipyard.spec import distribution as dist


def _mp(parameters: dict) -> dict:
    return {"smdistributed": {"modelparallel": {"enabled": True, "parameters": parameters}}}


def test_modelparallel_emits_mp_parameters():
    enabled = dist.normalize(_mp({"partitions": 2, "microbatches": 4, "bf16": True}))
    hps = dist.to_hyperparameters(enabled, "ml.p4d.24xlarge")
    assert hps == {  # SMP v1's `partitions` arrives under v2's name
        "mp_parameters": {"pipeline_parallel_degree": 2, "microbatches": 4, "bf16": True},
        "sagemaker_distributed_dataparallel_enabled": False,
        "sagemaker_instance_type": "ml.p4d.24xlarge",
    }


def test_dataparallel_emits_its_flag_and_round_trips():
    enabled = dist.normalize({"smdistributed": {"dataparallel": {"enabled": True}}})
    hps = dist.to_hyperparameters(enabled, "local")
    assert hps == {"sagemaker_distributed_dataparallel_enabled": True,
                   "sagemaker_distributed_dataparallel_custom_mpi_options": "", "sagemaker_instance_type": "local"}
    assert dist.from_hyperparameters(hps) == {"smdistributed": {"dataparallel": {"enabled": True,
                                                                                 "custom_mpi_options": ""}}}


def test_with_torch_distributed_both_sets_of_keys():
    enabled = dist.normalize({"torch_distributed": {"enabled": True}, **_mp({"tensor_parallel_degree": 2})})
    hps = dist.to_hyperparameters(enabled, "local")
    assert hps["sagemaker_torch_distributed_enabled"] is True
    assert hps["mp_parameters"] == {"tensor_parallel_degree": 2}


def test_disabled_strategies_enable_nothing():
    assert dist.normalize({"smdistributed": {"modelparallel": {"enabled": False}}}) == {}


@pytest.mark.parametrize(
    ("distribution", "field", "says"),
    [
        (_mp({"hybrid_shard_degre": 2}), "distribution.smdistributed.modelparallel.parameters",
         "did you mean 'hybrid_shard_degree'"),
        (_mp({"no_such_thing": 1}), "distribution.smdistributed.modelparallel.parameters", "use one of"),
        (_mp({"pipeline": "fast"}), "distribution.smdistributed.modelparallel.parameters.pipeline",
         "interleaved, simple"),
        (_mp({"placement_strategy": "near"}), "distribution.smdistributed.modelparallel.parameters.placement_strategy",
         "cluster, spread"),
        (_mp({"microbatches": 0}), "distribution.smdistributed.modelparallel.parameters.microbatches", ">= 1"),
        (_mp({"tensor_parallel_degree": "2"}), "distribution.smdistributed.modelparallel.parameters"
         ".tensor_parallel_degree", "integer"),
        (_mp({"bf16": True, "fp16": True}), "distribution.smdistributed.modelparallel.parameters.fp16", "bf16"),
        (_mp({"hybrid_shard_degree": 2, "shard_optimizer_state": True}),
         "distribution.smdistributed.modelparallel.parameters.shard_optimizer_state", "hybrid_shard_degree"),
        (_mp({"pipeline_parallel_degree": 2, "tensor_parallel_degree": 2}),
         "distribution.smdistributed.modelparallel.parameters.pipeline_parallel_degree", "not supported"),
        (_mp({"partitions": 2, "auto_partition": False}),
         "distribution.smdistributed.modelparallel.parameters.auto_partition", "smp.partition) is not served"),
        (_mp({"optimize": "time"}), "distribution.smdistributed.modelparallel.parameters.optimize", "speed, memory"),
        (_mp({"partitions": 2, "pipeline_parallel_degree": 4}),
         "distribution.smdistributed.modelparallel.parameters.pipeline_parallel_degree", "conflicts"),
        ({"smdistributed": {"dataparallel": {"enabled": True}, "modelparallel": {"enabled": True}}},
         "distribution.smdistributed", "only one smdistributed strategy"),
        ({"smdistributed": {"modelparallel": {"enabled": True, "params": {}}}},
         "distribution.smdistributed.modelparallel", "parameters"),
        ({"smdistributed": {"dataparallel": {"enabled": "yes"}}},
         "distribution.smdistributed.dataparallel.enabled", "true or false"),
    ],
)
def test_bad_smdistributed_options_name_the_field_and_the_fix(distribution, field, says):
    with pytest.raises(ValidationError) as info:
        dist.normalize(distribution)
    assert info.value.field == field
    assert says in str(info.value)


def test_estimator_accepts_smdistributed_and_refuses_bad_parameters(tmp_path):
    from shipyard.pytorch import PyTorch

    (tmp_path / "train.py").write_text("")
    est = PyTorch(entry_point="train.py", source_dir=str(tmp_path), instance_count=2, instance_type="local",
                  distribution=_mp({"hybrid_shard_degree": 2}))
    assert "smdistributed" in est._enabled_distribution
    with pytest.raises(ValidationError, match="hybrid_shard_degree"):
        PyTorch(entry_point="train.py", source_dir=str(tmp_path), instance_count=2, instance_type="local",
                distribution=_mp({"hybrid_shard_degre": 2}))
