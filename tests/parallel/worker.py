"""One rank of the equivalence runs: `python worker.py OUTDIR NAME...` with the launcher's RANK /
WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT in the environment (as torchrun sets them). For each
scenario it trains through shipyard.parallel and saves this rank's full parameters (or the error) and the
evidence of what the strategies did (evidence.py)."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.utils.data import TensorDataset

sys.path.insert(0, str(Path(__file__).parent))
import parallel_scenarios as sc  # noqa: E402
from evidence import Evidence, plain_name  # noqa: E402

import shipyard.parallel as sp  # noqa: E402


def train(scenario: sc.Scenario) -> tuple[dict[str, torch.Tensor], dict]:
    net = sc.model()
    model, optimizer = sp.prepare(net, sc.optimizer(scenario, net.parameters()), loss_fn=sc.loss_fn, **scenario.parameters)
    seen = Evidence(model, optimizer)
    x, y = sc.data(scenario)
    loader = sp.shard(TensorDataset(x, y), batch_size=sc.PER_RANK, shuffle=False)
    for inputs, targets in loader:
        sp.forward_backward(model, inputs, targets, sc.loss_fn)
        seen.after_backward()
        optimizer.step()
        optimizer.zero_grad()
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    return {plain_name(k): v.detach().clone() for k, v in state.items()}, seen.report()


def main() -> None:
    out = Path(sys.argv[1])
    sp.init(timeout_seconds=120)
    for name in sys.argv[2:]:
        target = out / f"{name}-rank{sp.rank()}.pt"
        try:
            state, evidence = train(sc.BY_NAME[name])
            torch.save(state, target)
            target.with_suffix(".json").write_text(json.dumps(evidence))
        except Exception:
            target.with_suffix(".error").write_text(traceback.format_exc())
            raise
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
