"""A small model trained in this process with an explicit Hook (no global torch hooks, so other tests are
untouched): the optimizer's own post-step hook ends TRAIN steps, as the global one does in jobs."""
from __future__ import annotations

import pytest


class Loop:
    def __init__(self, out, hook_parameters=None, collections=None, seed=0):
        import torch
        from torch import nn

        from shipyard.runtime.debugger.hook import Hook

        torch.manual_seed(seed)

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1, self.relu1, self.fc2 = nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)

            def forward(self, x):
                return self.fc2(self.relu1(self.fc1(x)))

        self.torch = torch
        self.model, self.loss_fn = Net(), nn.MSELoss()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.hook = Hook(str(out), hook_parameters, collections)
        self.hook.register_module(self.model)
        self.hook.register_loss(self.loss_fn)
        self.opt.register_step_post_hook(self.hook.end_step)
        self.x, self.y = torch.randn(6, 4), torch.randn(6, 1)

    def train(self, steps):
        self.model.train()
        for _ in range(steps):
            self.opt.zero_grad()
            loss = self.loss_fn(self.model(self.x), self.y)
            loss.backward()
            self.opt.step()

    def evaluate(self, batches):
        self.model.eval()
        with self.torch.no_grad():
            for i in range(batches):
                self.loss_fn(self.model(self.x + i), self.y)

    def close(self):
        self.hook.close()


@pytest.fixture
def loop(tmp_path):
    made = []

    def make(hook_parameters=None, collections=None, seed=0):
        made.append(Loop(tmp_path / "tensors", hook_parameters, collections, seed))
        return made[-1]

    return make
