"""A SageMaker-style PyTorch script using SageMaker's own libraries: the toolkit's Environment for where
things are, and smdebug's hook (created from the job's hook config) with a scalar of its own. Plain DDP
over gloo, one process per instance. Each instance writes what it saw to <model_dir>/<host>.json."""
import json
import os

import numpy as np
import smdebug.pytorch as smd
import torch
import torch.distributed as dist
from sagemaker_training import environment
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class Net(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1, self.relu1, self.fc2 = nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 1)

    def forward(self, x):
        return self.fc2(self.relu1(self.fc1(x)))


def load(channel_dir):
    data = torch.tensor(np.loadtxt(os.path.join(channel_dir, "data.csv"), delimiter=","), dtype=torch.float32)
    return data[:, 1:], data[:, :1]


def main():
    env = environment.Environment()
    hps = env.hyperparameters
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(Net(hps["hidden"]))
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=hps["lr"])
    x_train, y_train = load(env.channel_input_dirs["train"])
    x_test, y_test = load(env.channel_input_dirs["test"])

    hook = smd.Hook.create_from_json_file()
    hook.register_module(model)
    hook.register_loss(loss_fn)
    one_hook = smd.get_hook() is hook and smd.get_hook(create_if_not_exists=True) is hook

    hook.set_mode(smd.modes.TRAIN)
    model.train()
    train_losses = []
    for step in range(hps["steps"]):
        optimizer.zero_grad()
        loss = loss_fn(model(x_train[step::hps["steps"]]), y_train[step::hps["steps"]])
        loss.backward()
        hook.save_scalar("train_loss", loss.item())
        optimizer.step()
        train_losses.append(loss.item())

    hook.set_mode(smd.modes.EVAL)
    model.eval()
    eval_losses = []
    with torch.no_grad():
        for x, y in ((x_test[::2], y_test[::2]), (x_test[1::2], y_test[1::2])):
            loss = loss_fn(model(x), y)
            hook.save_scalar("eval_loss", loss.item())
            eval_losses.append(loss.item())

    seen = {name: env[name] for name in env.properties()}
    seen["types"] = {name: type(env[name]).__name__ for name in env.properties()}
    seen["channel_files"] = {name: sorted(os.listdir(path)) for name, path in env.channel_input_dirs.items()}
    seen["env_vars_differing"] = sorted(k for k, v in env.to_env_vars().items() if os.environ.get(k) != v)
    seen["module_model_dir"] = environment.model_dir
    seen.update(rank=dist.get_rank(), one_hook=one_hook, train_losses=train_losses, eval_losses=eval_losses)
    with open(os.path.join(env.model_dir, f"{env.current_host}.json"), "w") as f:
        json.dump(seen, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
