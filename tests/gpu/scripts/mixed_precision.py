"""Mixed precision on a GPU through shipyard.parallel: the job's mp_parameters say bf16 or fp16, the
script is a plain training loop. Records, per rank, the dtype and device of each Linear's output in
the forward (a forward hook), the parameters' dtype, the process group's backend, the fp16 loss
scaler's scale after every step and its growth tracker, and the losses."""

import json
import os

import torch
from torch import nn

import shipyard.parallel as sp

STEPS = 60

sp.init()
device = sp.device()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 1))
outputs = set()
for layer in (model[0], model[2]):
    layer.register_forward_hook(lambda _module, _args, out: outputs.add((str(out.dtype), out.device.type)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
model, optimizer = sp.prepare(model, optimizer)
scaler = getattr(optimizer, "scaler", None)  # fp16 only

generator = torch.Generator().manual_seed(1 + sp.rank())  # each rank its own data
losses, scales = [], []
for _ in range(STEPS):
    x = torch.randn(64, 32, generator=generator)
    y = x[:, :4].sum(dim=1, keepdim=True)  # something learnable
    loss = nn.functional.mse_loss(model(x.to(device)).float(), y.to(device))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    if scaler is not None:
        scales.append(scaler.get_scale())

record = {
    "rank": sp.rank(), "world": sp.world_size(), "backend": torch.distributed.get_backend(),
    "device": str(device), "strategies": list(model.shipyard_strategies),
    "outputs": sorted(outputs), "param_dtypes": sorted({str(p.dtype) for p in model.parameters()}),
    "losses": losses, "scales": scales,
    "growth_tracker": scaler._get_growth_tracker() if scaler is not None else None,  # steps since the last skip
}
torch.distributed.destroy_process_group()
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank{sp.rank()}.json"), "w") as f:
    json.dump(record, f)
