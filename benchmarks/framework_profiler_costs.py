"""What the framework recorder (shipyard/runtime/profiler/steps.py, phases.py, dataloader.py) costs a training
process while its step timeline records, measured directly in this process (on a shared machine an
end-to-end comparison cannot resolve a few tens of microseconds a step):

    .venv/bin/python benchmarks/framework_profiler_costs.py

- a module call with the phase hooks registered (a submodule's call: the depth count only), against
  the same call without them, and with empty global hooks (PyTorch's own dispatch of global hooks);
- a root module's call (a Forward event);
- recording one event, and writing it to a trace file;
- the optimizer listeners of one step (Backward, Optimizer and Step events, ranges), without writing;
- the estimate for benchmarks/instrumentation_overhead.py's MLP step (7 module calls, 2 of them roots,
  6 events a step), against its step time given with --step-ms.

Each figure is the best of 5 repeats of many calls (CPU-bound, so the least disturbed repeat)."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import timeit


def best(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--step-ms", type=float, default=4.4, help="the step time to compare with (ms)")
    args = parser.parse_args()
    os.environ.setdefault("RANK", "0")
    import torch
    from torch import nn
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

    from shipyard.runtime.profiler.steps import StepRecorder

    # A timeline on every step, no profiler in range: what FrameworkProfile() costs on most steps.
    recorder = StepRecorder(tempfile.mkdtemp(), {"python_profiling_config": {"start_step": 10**9}})
    x = torch.zeros(1)

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.ModuleList(nn.Identity() for _ in range(10))

        def forward(self, value):
            for module in self.inner:
                value = module(value)
            return value

    outer, leaf = Outer(), nn.Identity()
    n = 20_000
    bare = best(lambda: outer(x), n)
    handles = [register_module_forward_pre_hook(lambda m, a: None),
               register_module_forward_hook(lambda m, a, o: None, always_call=True)]
    empty = best(lambda: outer(x), n)
    for handle in handles:
        handle.remove()
    recorder.phases.attach()
    recorder.phases.set_active(True)
    recorder.started = 1  # as if step 1 had started
    recorder.timeline_on = True
    hooked = best(lambda: outer(x), n)
    root_hooked = best(lambda: leaf(x), 10 * n)  # a root call: a Forward event each
    recorder.phases.detach()
    root = root_hooked - best(lambda: leaf(x), 10 * n)
    per_call = (hooked - bare) / 11
    per_empty = (empty - bare) / 11

    events = 100_000
    record = best(lambda: recorder.timeline.add("Forward", 1.0, 2.0, 5, mode="TRAIN"), events)
    sample = recorder.timeline.events[:10_000]
    write = best(lambda: json.dumps(sample), 3) / len(sample)
    recorder.timeline.events = []
    recorder.timeline.max_size = 10**15  # no file writes inside the step measurement

    def step() -> None:
        recorder.phases.forward_end = 1.0
        recorder.phases.before_optimizer()
        recorder.on_step()

    recorder.phases.attach()
    recorder.phases.set_active(True)
    listeners = best(step, 50_000)
    recorder.phases.detach()
    estimate = 7 * per_call + 2 * (root - per_call) + listeners + 6 * write + record  # + DataLoaderIter's record
    print(f"module call with the phase hooks: +{per_call * 1e6:.2f} us (empty global hooks: +{per_empty * 1e6:.2f} us)")
    print(f"root module call (Forward event): +{root * 1e6:.2f} us")
    print(f"record an event: {record * 1e6:.2f} us; write an event: {write * 1e6:.2f} us")
    print(f"optimizer listeners of a step (Backward, Optimizer, Step events; no write): {listeners * 1e6:.2f} us")
    print(f"estimate for the MLP step: {estimate * 1e6:.1f} us = {estimate * 1e3 / args.step_ms * 100:.2f} % "
          f"of a {args.step_ms} ms step")


if __name__ == "__main__":
    main()
