"""A Hugging Face Trainer script, written as SageMaker's Hugging Face examples are, under the HuggingFace
estimator with torch_distributed across 2 instances, on the CPU (gloo). The model is a tiny BERT built here
and handed to the job as a channel: nothing comes from the hub (HF_HUB_OFFLINE=1 in the job)."""

from __future__ import annotations

import importlib.util
import json
import random
import shutil
import tarfile
from pathlib import Path

import pytest

from shipyard.huggingface import HuggingFace

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None
                                 or importlib.util.find_spec("accelerate") is None,
                                 reason="transformers and accelerate not installed")]

WORDS = {1: ["good", "great", "fine"], 0: ["bad", "awful", "poor"]}


def _pretrained(directory: Path) -> None:
    """A two-layer BERT classifier with a word-level vocabulary, as save_pretrained writes it."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "movie", "film", "plot", "was",
             *WORDS[0], *WORDS[1]]
    tokenizer = BertTokenizer(vocab={word: i for i, word in enumerate(words)})
    config = BertConfig(vocab_size=len(words), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32, num_labels=2)
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def _reviews(path: Path, count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        label = rng.randrange(2)
        rows.append({"text": f"the {rng.choice(['movie', 'film', 'plot'])} was {rng.choice(WORDS[label])}",
                     "label": label})
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return rows


def test_trainer_script_across_two_instances(home, tmp_path):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    data = tmp_path / "data"
    _pretrained(data / "pretrained")
    _reviews(data / "train" / "train.jsonl", 64, seed=0)
    test_rows = _reviews(data / "test" / "test.jsonl", 16, seed=1)
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(Path(__file__).parent / "scripts" / "hf_trainer.py", source / "train.py")

    est = HuggingFace(entry_point="train.py", source_dir=str(source), instance_count=2,
                      transformers_version="5.24", pytorch_version="2.13", py_version="py311",
                      distribution={"torch_distributed": {"enabled": True}},
                      hyperparameters={"epochs": 8, "train_batch_size": 8, "learning_rate": 0.005,
                                       "model_name_or_path": "/opt/ml/input/data/pretrained"},
                      # One thread a process: both instances share this machine's cores, and Accelerate would
                      # give each process all of them (spinning OpenMP threads then slow every step tenfold).
                      environment={"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}, stop_grace_seconds=5)
    est.fit({name: f"file://{data / name}" for name in ("train", "test", "pretrained")}, logs=False)

    model_dir = tmp_path / "model"
    with tarfile.open(est.model_data.removeprefix("file://")) as tar:
        tar.extractall(model_dir, filter="data")
    seen = [json.loads((model_dir / f"process-{i}.json").read_text()) for i in range(2)]
    # One process group across both instances, as Trainer saw it: DDP over gloo, and not SageMaker's own
    # data or model parallelism, although shipyard serves `smdistributed` to the job's processes.
    assert [(s["process_index"], s["world_size"], s["host"], s["local_process_index"]) for s in seen] == [
        (0, 2, "algo-1", 0), (1, 2, "algo-2", 0)]
    for s in seen:
        assert (s["backend"], s["parallel_mode"], s["wrapped"]) == (
            "gloo", "ParallelMode.DISTRIBUTED", "DistributedDataParallel")
        assert (s["sagemaker_dp"], s["sagemaker_mp"], s["smdistributed_found"]) == (False, False, True)
    losses = seen[0]["losses"]
    assert len(losses) == 8 * 64 // (8 * 2)   # each step a batch of 8 on each of the 2 processes
    assert sum(losses[-4:]) < 0.8 * sum(losses[:4]), losses

    # What trainer.save_model wrote loads back as any pretrained model does, and learned the task.
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    batch = tokenizer([row["text"] for row in test_rows], padding=True, return_tensors="pt")
    with torch.no_grad():
        predicted = model(**batch).logits.argmax(-1).tolist()
    assert predicted == [row["label"] for row in test_rows]
