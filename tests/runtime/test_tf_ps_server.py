"""The parameter-server sidecar, a real TensorFlow server: it serves its task from TF_CONFIG, and once
told to stop, a non-leader's waits until the master's task is down (the toolkit's
_wait_until_master_is_down), a leader's stops at once."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from shipyard.runtime.ports import free_port


def _start(task_index: int, master: socket.socket) -> subprocess.Popen:
    ps = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    config = {"cluster": {"master": [f"127.0.0.1:{master.getsockname()[1]}"], "ps": ps, "worker": ["127.0.0.1:1"]},
              "environment": "cloud", "task": {"index": task_index, "type": "ps"}}
    env = {**os.environ, "TF_CONFIG": json.dumps(config), "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.Popen([sys.executable, "-m", "shipyard.runtime.launchers.parameter_server"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # TensorFlow prints its own lines first (absl's notice, oneDNN's), how many depends on its version.
    listening = f"parameter server ps:{task_index} listening on {ps[task_index]}"
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(listening):
            break
    else:
        raise AssertionError(f"the server ended without {listening!r}: {''.join(seen)}")
    socket.create_connection(("127.0.0.1", int(ps[task_index].rpartition(":")[2])), timeout=5).close()
    return proc


@pytest.mark.slow
def test_worker_parameter_server_outlives_its_script_until_master_is_down():
    with socket.create_server(("127.0.0.1", 0)) as master:
        proc = _start(1, master)
        proc.send_signal(signal.SIGTERM)
        time.sleep(3)  # several polls of the master
        assert proc.poll() is None, "stopped while the master was still up"
    assert proc.wait(timeout=30) == 0


@pytest.mark.slow
def test_leader_parameter_server_stops_at_once():
    with socket.create_server(("127.0.0.1", 0)) as master:
        proc = _start(0, master)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
