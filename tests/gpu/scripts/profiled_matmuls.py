"""Real CUDA work for the profiler: large matmuls trained for some seconds on algo-1's first GPU, so NVML
sees it busy and torch.profiler records CUDA kernels. The other hosts never touch their GPUs (nor
import torch), so their own GPU metrics must show them idle."""

import os
import sys
import time

SECONDS = 8.0
MIN_STEPS = 10  # past the detailed profiling range, however slow the GPU

if os.environ["SM_CURRENT_HOST"] != "algo-1":
    time.sleep(SECONDS)
    sys.exit(0)

import torch

device = torch.device("cuda", 0)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(8192, 4096, device=device)
end, step = time.monotonic() + SECONDS, 0
while step < MIN_STEPS or time.monotonic() < end:
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    loss.item()  # waits for the GPU, so a step's time is its own work
    step += 1
print(f"steps={step} device={next(model.parameters()).device}", flush=True)
