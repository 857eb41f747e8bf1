"""Following a job (fit(), `shipyard wait`) on records written directly in the store: a step whose
message changes (its place in the capacity queue) is shown again, not only when the step begins."""

from __future__ import annotations

import io
import threading
import time

from rich.console import Console

from shipyard.sdk.watch import POLL_SECONDS, watch
from shipyard.spec.job import JobSpec
from shipyard.store import Store


def test_a_step_s_new_message_is_shown_as_it_changes(tmp_path):
    store = Store(tmp_path)
    store.create_job(JobSpec(job_name="job-1", output_path="file:///out",
                             hyperparameters={"sagemaker_program": '"t.py"'}))
    store.transition("job-1", "InProgress", "Starting", "Waiting for capacity: 2nd in the queue")

    def the_queue_moves_then_the_job_stops() -> None:
        time.sleep(5 * POLL_SECONDS)
        store.transition("job-1", "InProgress", "Starting", "Waiting for capacity: 1st in the queue")
        time.sleep(5 * POLL_SECONDS)
        store.transition("job-1", "Stopped", "Stopped", "Stop requested")

    mover = threading.Thread(target=the_queue_moves_then_the_job_stops)
    mover.start()
    out = io.StringIO()
    watch(store, "job-1", show_logs=False, console=Console(file=out, width=200))
    mover.join()
    shown = [line.split(" - ", 1)[1] for line in out.getvalue().splitlines() if " - " in line]
    assert shown == ["Waiting for capacity: 2nd in the queue", "Waiting for capacity: 1st in the queue",
                     "Stop requested"]
