"""What frameworks print before and between a script's own lines, verbatim in form: absl's start-up
notice and glog lines (TensorFlow, torchrun), TensorFlow's C++ lines, torch's C++ warnings, NCCL's info.
`emit()` prints it to stderr, more of it than a failure reason holds, as a real job's log has it."""

import sys

NOISE = """\
WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
I0000 00:00:1795530313.878005       4 port.cc:153] oneDNN custom operations are on. You may see slightly \
different numerical results due to floating-point round-off errors from different computation orders. To turn \
them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.
2026-11-24 14:25:13.009123: I tensorflow/core/platform/cpu_feature_guard.cc:210] This TensorFlow binary is \
optimized to use available CPU instructions in performance-critical operations.
[W1124 14:25:13.009000 77 torch/csrc/distributed/c10d/ProcessGroupGloo.cpp:516] Warning: unable to resolve \
hostname to a (local) address. Using the loopback address as fallback.
algo-1:77:77 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>
E1124 14:25:13.009000 1234 torch/distributed/elastic/multiprocessing/api.py:882] failed (exitcode: 1) local_rank: 0
"""


def emit(times: int = 3) -> None:
    sys.stderr.write(NOISE * times)
    sys.stderr.flush()
