"""Run examples/parallel/src/train.py as a 2-instance job with one strategy from the job's
configuration:

    .venv/bin/python examples/parallel/run.py fsdp          # or: ddp zero1 hybrid tensor_parallel pipeline
                                                            #     bf16 fp16 accumulation checkpointing offloading
    .venv/bin/python examples/parallel/run.py fsdp --instances 2 --processes 2

The script never changes; only `distribution` does."""

from __future__ import annotations

import argparse
from pathlib import Path

from shipyard.pytorch import PyTorch

STRATEGIES = {
    "ddp": {"ddp": True},
    "zero1": {"shard_optimizer_state": True},
    "fsdp": {"hybrid_shard_degree": 2},
    "hybrid": {"hybrid_shard_degree": 2},  # with 4 ranks: shard in pairs, replicate the pairs
    "tensor_parallel": {"tensor_parallel_degree": 2},
    "pipeline": {"pipeline_parallel_degree": 2, "microbatches": 4, "pipeline": "interleaved"},
    "bf16": {"bf16": True},
    "fp16": {"fp16": True},
    "accumulation": {"gradient_accumulation_steps": 4},
    "checkpointing": {"activation_checkpointing": True},
    "offloading": {"activation_checkpointing": True, "sm_activation_offloading": True},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("strategy", choices=sorted(STRATEGIES))
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--processes", type=int, default=1, help="processes per instance")
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    distribution = {"smdistributed": {"modelparallel": {"enabled": True,
                                                        "parameters": STRATEGIES[args.strategy]}}}
    if args.processes > 1:  # smdistributed has no processes_per_host; torch_distributed's carries it
        distribution["torch_distributed"] = {"enabled": True, "processes_per_host": args.processes}
    estimator = PyTorch(entry_point="train.py", source_dir=str(Path(__file__).parent / "src"),
                        instance_count=args.instances, instance_type="local", distribution=distribution,
                        hyperparameters={"steps": args.steps}, base_job_name=f"parallel-{args.strategy}")
    estimator.fit()
    print(f"model: {estimator.model_data}")


if __name__ == "__main__":
    main()
