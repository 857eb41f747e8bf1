"""A Hugging Face training script in the style of SageMaker's Hugging Face examples: hyperparameters as
command-line arguments, paths from SM_* variables, `Trainer(...).train()` and `trainer.save_model` into
SM_MODEL_DIR. Data is a JSON-lines file of {"text", "label"} in the `train` channel (and `test`); the model
and tokenizer are read from `--model_name_or_path` (a directory here: nothing comes from the hub).

Besides the model, every process writes what Trainer saw of the cluster (world size, its index, the
torch.distributed backend, whether transformers chose SageMaker's own data or model parallelism) to
`process-<index>.json` in the model directory, for the test to read (a user's script has no need to)."""

import argparse
import importlib.util
import json
import logging
import os
import sys

import torch
import torch.distributed as dist
from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments
from transformers.utils import is_sagemaker_dp_enabled, is_sagemaker_mp_enabled


class TextDataset(torch.utils.data.Dataset):
    def __init__(self, path, tokenizer, max_length):
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        self.encodings = tokenizer([r["text"] for r in rows], truncation=True, padding="max_length",
                                   max_length=max_length)
        self.labels = [r["label"] for r in rows]

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        item = {key: torch.tensor(values[i]) for key, values in self.encodings.items()}
        item["labels"] = torch.tensor(self.labels[i])
        return item


def compute_metrics(prediction):
    predicted = prediction.predictions.argmax(-1)
    return {"accuracy": float((predicted == prediction.label_ids).mean())}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train_batch_size", type=int, default=8)
    parser.add_argument("--eval_batch_size", type=int, default=16)
    parser.add_argument("--learning_rate", type=str, default=5e-5)
    parser.add_argument("--max_length", type=int, default=16)
    parser.add_argument("--model_name_or_path", type=str)
    parser.add_argument("--output_data_dir", type=str, default=os.environ["SM_OUTPUT_DATA_DIR"])
    parser.add_argument("--model_dir", type=str, default=os.environ["SM_MODEL_DIR"])
    parser.add_argument("--n_gpus", type=str, default=os.environ["SM_NUM_GPUS"])
    parser.add_argument("--training_dir", type=str, default=os.environ["SM_CHANNEL_TRAIN"])
    parser.add_argument("--test_dir", type=str, default=os.environ["SM_CHANNEL_TEST"])
    args, _ = parser.parse_known_args()

    logging.basicConfig(level=logging.INFO, handlers=[logging.StreamHandler(sys.stdout)],
                        format="%(asctime)s - %(name)s - %(levelname)s - %(message)s")
    logger = logging.getLogger(__name__)

    tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
    model = AutoModelForSequenceClassification.from_pretrained(args.model_name_or_path)
    train_dataset = TextDataset(os.path.join(args.training_dir, "train.jsonl"), tokenizer, args.max_length)
    test_dataset = TextDataset(os.path.join(args.test_dir, "test.jsonl"), tokenizer, args.max_length)
    logger.info(f"loaded train_dataset length is: {len(train_dataset)}")

    training_args = TrainingArguments(
        output_dir=args.model_dir,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.train_batch_size,
        per_device_eval_batch_size=args.eval_batch_size,
        learning_rate=float(args.learning_rate),
        logging_steps=1,
        save_strategy="no",
        seed=0,
    )
    trainer = Trainer(model=model, args=training_args, train_dataset=train_dataset, eval_dataset=test_dataset,
                      compute_metrics=compute_metrics, processing_class=tokenizer)
    trainer.train()
    eval_result = trainer.evaluate(eval_dataset=test_dataset)

    if trainer.is_world_process_zero():
        with open(os.path.join(args.output_data_dir, "eval_results.txt"), "w") as writer:
            for key, value in sorted(eval_result.items()):
                writer.write(f"{key} = {value}\n")
    trainer.save_model(args.model_dir)

    seen = {
        "world_size": trainer.args.world_size, "process_index": trainer.args.process_index,
        "local_process_index": trainer.args.local_process_index, "parallel_mode": str(trainer.args.parallel_mode),
        "backend": dist.get_backend() if dist.is_initialized() else None,
        "wrapped": type(trainer.model_wrapped).__name__,
        "sagemaker_dp": is_sagemaker_dp_enabled(), "sagemaker_mp": is_sagemaker_mp_enabled(),
        "smdistributed_found": importlib.util.find_spec("smdistributed") is not None,
        "host": os.environ["SM_CURRENT_HOST"],
        "losses": [entry["loss"] for entry in trainer.state.log_history if "loss" in entry],
    }
    with open(os.path.join(args.model_dir, f"process-{trainer.args.process_index}.json"), "w") as f:
        json.dump(seen, f)
