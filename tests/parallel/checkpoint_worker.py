"""One rank of the checkpoint round trip: `python checkpoint_worker.py CKPT_DIR OUT NAME...`. Per
scenario: train 2 steps, save, train 2 more (run A); then a differently initialised model and a fresh
optimizer load the checkpoint (it must say step 2) and train the same 2 steps (run B). A and B must end
equal: the parameters, the optimizer state and the optimizer wrapper's state all came back."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.utils.data import TensorDataset

sys.path.insert(0, str(Path(__file__).parent))
import parallel_scenarios as sc  # noqa: E402
from evidence import plain_name  # noqa: E402

import shipyard.parallel as sp  # noqa: E402


def prepared(scenario, seed):
    net = sc.model()
    if seed:
        torch.manual_seed(seed)
        for p in net.parameters():
            torch.nn.init.normal_(p)
    return sp.prepare(net, sc.optimizer(scenario, net.parameters()), loss_fn=sc.loss_fn, **scenario.parameters)


def steps(model, optimizer, batches):
    for inputs, targets in batches:
        sp.forward_backward(model, inputs, targets, sc.loss_fn)
        optimizer.step()
        optimizer.zero_grad()


def full(model):
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    return {plain_name(k): v.detach().clone() for k, v in state.items()}


def main() -> None:
    root, out = Path(sys.argv[1]), Path(sys.argv[2])
    sp.init(timeout_seconds=120)
    for name in sys.argv[3:]:
        scenario = sc.BY_NAME[name]
        model, optimizer = prepared(scenario, 0)
        x, y = sc.data(scenario)
        batches = list(sp.shard(TensorDataset(x, y), batch_size=sc.PER_RANK, shuffle=False))
        k = scenario.accumulation
        steps(model, optimizer, batches[:2 * k])
        sp.save_checkpoint(root / name, model, optimizer, step=2)
        steps(model, optimizer, batches[2 * k:4 * k])
        a = full(model)
        model, optimizer = prepared(scenario, 123)
        resumed = sp.load_checkpoint(root / name, model, optimizer)
        steps(model, optimizer, batches[2 * k:4 * k])
        torch.save({"step": resumed, "a": a, "b": full(model)}, out / f"{name}-rank{sp.rank()}.pt")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
