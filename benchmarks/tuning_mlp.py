"""The trial of benchmarks/tuning.py: a small real model, a 2-hidden-layer MLP (`--width` units each,
ReLU, Adam at `--lr`, minibatches of `--batch_size`) fitting a generated regression task (a fixed random
teacher network, tanh, of 16 inputs plus noise; 2,048 training and 1,024 validation samples, the same for
every trial: data seed 0). Prints `val_loss=` (the validation MSE) once per epoch, with the `time=` it was
printed at. Every epoch it saves model, optimizer and epoch to /opt/ml/checkpoints (a temporary file,
then os.replace) before printing the epoch's value, and it resumes from that checkpoint when one is
there, saying `first_epoch=N`; the initial weights and each epoch's shuffling follow fixed seeds, so a
resumed run trains as an uninterrupted one would. A stop (SIGTERM) ends it after the epoch in progress,
so every epoch trained is both checkpointed and reported.

An epoch is the real training work (0.01-0.1 s on one thread, by width and batch size) plus a wait up to
`--min-epoch-seconds` (0.25 s by default), standing in for a larger model: every epoch costs about the
same whatever the configuration, so trial-epochs measure compute, and a stop request (Hyperband's pause
at a rung; the tuning process looks every 0.5 s) lands within a few epochs. `train()` is importable:
benchmarks/tuning.py --calibrate runs it in-process, without the wait."""

from __future__ import annotations

import argparse
import os
import signal
import time

DATA_SEED, INPUTS, TEACHER, TRAIN, VALID, NOISE = 0, 16, 32, 2048, 1024, 0.1
CHECKPOINT = "/opt/ml/checkpoints/state.pt"


def data():
    import torch

    g = torch.Generator().manual_seed(DATA_SEED)
    x = torch.randn(TRAIN + VALID, INPUTS, generator=g)
    w1 = torch.randn(INPUTS, TEACHER, generator=g) / INPUTS ** 0.5
    w2 = torch.randn(TEACHER, 1, generator=g) * 3 / TEACHER ** 0.5
    y = torch.tanh(x @ w1) @ w2 + NOISE * torch.randn(TRAIN + VALID, 1, generator=g)
    return x[:TRAIN], y[:TRAIN], x[TRAIN:], y[TRAIN:]


def train(lr: float, width: int, batch_size: int, epochs: int, checkpoint: str | None = None,
          min_epoch_seconds: float = 0.0, log=print) -> list[float]:
    """Train from the checkpoint (if any) to `epochs`; the validation loss of each epoch trained."""
    import torch

    torch.set_num_threads(1)
    xt, yt, xv, yv = data()
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(INPUTS, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                torch.nn.ReLU(), torch.nn.Linear(width, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    start = 0
    if checkpoint and os.path.exists(checkpoint):
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"]
    log(f"first_epoch={start + 1}")
    losses = []
    stopping = []
    if checkpoint:  # a stop (SIGTERM) ends the job after the epoch in progress: its checkpoint and value kept
        signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    for epoch in range(start + 1, epochs + 1):
        began = time.monotonic()
        order = torch.randperm(TRAIN, generator=torch.Generator().manual_seed(1000 + epoch))
        model.train()
        for i in range(0, TRAIN, batch_size):
            batch = order[i:i + batch_size]
            loss = torch.nn.functional.mse_loss(model(xt[batch]), yt[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            val = torch.nn.functional.mse_loss(model(xv), yv).item()
        if val != val or val > 1e6:  # diverged: report a large loss the metric regex still reads
            val = 1e6
        if checkpoint:
            os.makedirs(os.path.dirname(checkpoint), exist_ok=True)
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                       checkpoint + ".tmp")
            os.replace(checkpoint + ".tmp", checkpoint)
        time.sleep(max(0.0, min_epoch_seconds - (time.monotonic() - began)))
        log(f"epoch={epoch} val_loss={val:.6f} time={time.time():.3f}")
        losses.append(val)
        if stopping:
            break
    return losses


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=9)
    parser.add_argument("--min-epoch-seconds", type=float, default=0.25)
    args, _ = parser.parse_known_args()
    train(args.lr, args.width, args.batch_size, args.epochs, CHECKPOINT, args.min_epoch_seconds,
          log=lambda line: print(line, flush=True))
    if os.path.isdir("/opt/ml/model"):
        open("/opt/ml/model/done", "w").write(str(args.epochs))


if __name__ == "__main__":
    main()
