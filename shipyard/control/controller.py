"""The job controller: `python -m shipyard.control.controller JOB`, one detached process per job, so a
job keeps running when the client that submitted it exits. It steps the job through

    Starting -> Downloading -> Training -> Uploading -> Completed
                                     \\-> Failed | Stopping -> Stopped (Stopped | MaxRuntimeExceeded)

recording every transition in the store, turning agent events into statuses and log lines into
metrics, and ending the job in a true state whatever happens (an exception here is a Failed job with
the reason, never a job left InProgress)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from shipyard.settings import shipyard_home

PLAN_FILE = "plan.json"     # written by control/planning.py, read here
POLL_SECONDS = 0.1
# When one instance failed, the others are usually stuck in a collective: give them little time.
FAILURE_GRACE_SECONDS = 10.0
MAX_FAILURE_REASON = 1024


class JobController:
    """Runs the plan the submitting client wrote (control/planning.py). Instances are started before
    anything heavy is imported: the store and metric machinery load while the instances boot."""

    def __init__(self, home: Path, name: str) -> None:
        self.home, self.name = home, name
        self.job_dir = home / "jobs" / name
        self.store = None
        self.instances: list = []
        self.exit_codes: dict[str, int] = {}
        self.exit_order: list[str] = []
        self.phases: dict[str, str] = {}
        self.scrapers: list = []

    # -- the whole lifecycle ------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._start_instances()
            self._open_store()
            self._run()
        except Exception as exc:
            self._open_store()
            self.store.add_event(self.name, "error", traceback.format_exc())
            self._kill_all()
            self._finish("Failed", "Failed", f"InternalServerError: {type(exc).__name__}: {exc}")
        finally:
            self._kill_all()

    def _start_instances(self) -> None:
        from shipyard.backends import get_backend

        plan = json.loads((self.job_dir / PLAN_FILE).read_text())
        backend = get_backend(plan["backend"], job_dir=self.job_dir)
        plans = [backend.plan_type.from_dict(item) for item in plan["instances"]]
        self.started_at = time.time()
        self.instances = [backend.start(p) for p in plans]

    def _open_store(self) -> None:
        if self.store is None:
            from shipyard.store import Store

            self.store = Store(self.home)
            self.spec = self.store.get_job(self.name).spec

    def _run(self) -> None:
        from shipyard.control.metrics import LogScraper, unmatched_report
        from shipyard.runtime.events import EventReader

        self.store.update_job(self.name, training_start_time=self.started_at)
        self.store.add_event(self.name, "info", f"started {len(self.instances)} instance(s): "
                             + ", ".join(f"{i.host} (pid {i.process.pid})" for i in self.instances))
        problem = self.instances[0].plan.sandbox_problem
        if problem:
            self.store.add_event(self.name, "warning", f"instances run without a sandbox: {problem}; "
                                 "SM_* paths point at each instance's directory, not /opt/ml")
        readers = {i.host: EventReader(Path(i.plan.config.events_path)) for i in self.instances}
        self.scrapers = [
            LogScraper(i.host, Path(i.plan.config.log_path), self.spec.metric_definitions) for i in self.instances
        ]
        outcome = self._monitor(readers)
        self._scrape()
        for problem in unmatched_report(self.spec.metric_definitions, self.scrapers):
            self.store.add_event(self.name, "warning", problem)
        self._conclude(outcome)

    def _monitor(self, readers: dict[str, EventReader]) -> tuple[str, str | None]:
        """Watch until every instance has exited, or a stop, a timeout or a failure ends the job."""
        started = time.monotonic()
        while True:
            for host, reader in readers.items():
                for event in reader.read():
                    self._on_event(host, event)
            self._scrape()
            for instance in self.instances:
                code = instance.poll()
                if code is not None and instance.host not in self.exit_codes:
                    self.exit_codes[instance.host] = code
                    self.exit_order.append(instance.host)
            failed = [h for h in self.exit_order if self.exit_codes[h] != 0]
            if failed:
                return "failed", failed[0]
            if len(self.exit_codes) == len(self.instances):
                return "completed", None
            if self.store.stop_requested(self.name):
                return "stopped", "Stopped"
            if time.monotonic() - started > self.spec.max_run:
                return "stopped", "MaxRuntimeExceeded"
            time.sleep(POLL_SECONDS)

    def _on_event(self, host: str, event: dict) -> None:
        kind = event.get("event")
        if kind == "phase":
            self.phases[host] = event["phase"]
            if event["phase"] == "Downloading" and len(self.phases) == 1:
                self.store.transition(self.name, "InProgress", "Downloading", "Downloading input data")
            elif event["phase"] == "Training" and all(
                self.phases.get(i.host) == "Training" for i in self.instances
            ):
                self.store.transition(self.name, "InProgress", "Training", "Training in progress")
        elif kind == "progress":
            self.store.add_event(
                self.name, "progress",
                f"{event['what']} {event.get('channel', '')} {event['done']}/{event['total']}", host,
            )

    def _scrape(self) -> None:
        for scraper in self.scrapers:
            self.store.add_metrics(self.name, scraper.scrape())

    # -- endings ------------------------------------------------------------------------------
    def _conclude(self, outcome: tuple[str, str | None]) -> None:
        kind, detail = outcome
        if kind == "completed":
            self.store.transition(self.name, "InProgress", "Uploading", "Uploading generated training model")
            self._upload()
            self._finish("Completed", "Completed", None)
        elif kind == "failed":
            reason = self._failure_reason(detail)
            self._shutdown(FAILURE_GRACE_SECONDS)
            self._upload()
            self._finish("Failed", "Failed", reason)
        else:
            message = ("Stop requested" if detail == "Stopped"
                       else f"Stopped: MaxRuntimeInSeconds {self.spec.max_run} exceeded")
            self.store.transition(self.name, "Stopping", "Stopping", message)
            self._shutdown(self.spec.stop_grace_seconds)
            self._upload()
            self._finish("Stopped", detail, None)

    def _finish(self, status: str, secondary: str, reason: str | None) -> None:
        if reason:
            self.store.update_job(self.name, failure_reason=reason[:MAX_FAILURE_REASON])
        self.store.update_job(self.name, training_end_time=time.time())
        self.store.transition(self.name, status, secondary, reason.splitlines()[0] if reason else "")

    def _failure_reason(self, host: str) -> str:
        instance = next(i for i in self.instances if i.host == host)
        failure = instance.plan.ml_dir / "output" / "failure"
        code = self.exit_codes[host]
        if failure.exists():
            text = failure.read_text(errors="replace").strip()
            return f"AlgorithmError: {host}: {text}"
        from shipyard.runtime.failure import error_excerpt

        excerpt = error_excerpt(Path(instance.plan.config.log_path), max_lines=10)
        return f"InternalServerError: {host}: the instance exited with code {code} and no failure file\n{excerpt}"

    def _shutdown(self, grace: float) -> None:
        """SIGTERM, the grace period, then SIGKILL: whatever the script saves in time is kept."""
        running = [i for i in self.instances if i.poll() is None]
        for instance in running:
            instance.terminate()
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(i.poll() is None for i in running):
            time.sleep(POLL_SECONDS)
        self._kill_all()

    def _kill_all(self) -> None:
        for instance in self.instances:
            if instance.poll() is None:
                instance.kill()

    def _upload(self) -> None:
        from shipyard.storage import archive, transfer
        from shipyard.storage import uri as uris

        output = uris.join(self.spec.output_path, self.name, "output")
        staging = self.job_dir / "artifacts"
        staging.mkdir(parents=True, exist_ok=True)
        ml_dirs = [i.plan.ml_dir for i in self.instances]
        uploaded = {}
        for name, subdir, field in (("model.tar.gz", "model", "model_artifacts"),
                                    ("output.tar.gz", "output/data", "output_artifacts")):
            tarball = staging / name
            files = archive.make_tarball(tarball, [d / subdir for d in ml_dirs])
            destination = uris.join(output, name)
            transfer.upload_file(tarball, destination)
            uploaded[field] = destination
            self.store.add_event(self.name, "upload", f"{name}: {files} files, "
                                 f"{tarball.stat().st_size} bytes to {destination}")
        self.store.update_job(self.name, **uploaded)


def spawn(store, name: str) -> int:
    """Start the job's controller as a detached process (its own session, no terminal), record its
    pid, and return it. Its own output goes to the job's controller.log."""
    job_dir = store.job_dir(name)
    job_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SHIPYARD_HOME": str(store.home)}
    with open(job_dir / "controller.log", "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "shipyard.control.controller", name],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True,
            close_fds=True,
        )
    import psutil

    store.update_job(name, controller_pid=process.pid, controller_started=psutil.Process(process.pid).create_time())
    # Reap it if this client outlives it, so a finished controller is never mistaken for a live zombie.
    threading.Thread(target=process.wait, daemon=True).start()
    return process.pid


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m shipyard.control.controller JOB", file=sys.stderr)
        return 2
    JobController(shipyard_home(), args[0]).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
