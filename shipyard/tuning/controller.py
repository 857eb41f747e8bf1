"""The tuning process: `python -m shipyard.tuning.controller NAME`, one detached process per tuning job,
as a job has its controller, so tuning goes on when the client exits. Each step it reads the trials'
jobs from the store, asks the policies what to do (early stopping, Hyperband's pauses and promotions,
the completion criteria) and acts: it stops a trial's job with the reason, starts the next trial, or
ends the tuning job. What it decides from lives in the store and in the study's SQLite file, so a
process killed anywhere is replaced by one that continues (reconcile()): a trial recorded but not yet
started is started once, a job that ended while no process watched is counted once."""

from __future__ import annotations

import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from shipyard.settings import shipyard_home
from shipyard.store.tuning import events_key
from shipyard.tuning.search import Proposal

POLL_SECONDS = 0.5
STOP_MARGIN_SECONDS = 2.0   # with max_cost: this loop's poll and the trial's own, besides its grace


@dataclass
class Config:
    """One configuration (an Optuna trial) and the jobs that trained it, in order."""

    proposal: Proposal
    jobs: list = field(default_factory=list)   # store.tuning.Trial, by seq

    @property
    def latest(self):
        return self.jobs[-1]


class TuningController:
    def __init__(self, home: Path, name: str) -> None:
        from shipyard.store import Store
        from shipyard.store.tuning import TuningStore
        from shipyard.tuning.search import Search

        self.store = Store(home)
        self.tuning = TuningStore(self.store)
        self.name = name
        self.spec = self.tuning.get(name).spec
        self.minimize = self.spec.objective_type == "Minimize"
        self.search = Search(self.spec, study_path(self.store, name))
        self.checked: dict[str, int] = {}   # job -> epochs the median rule has looked at
        # job -> (its end time, its final objective), or None for a trial never started: read once, as
        # an ended job's no longer change.
        self.ended: dict[str, tuple[float, float | None] | None] = {}
        self.curves: dict[str, list[float]] = {}
        self.statuses: dict[str, str] = {}   # job -> the status an ended trial's job ended with
        self.costs: dict[str, float] = {}   # job -> what an ended trial cost (with max_cost only)
        self.spent = 0.0                    # what every trial has cost so far (with max_cost only)

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._warm_start()
            while not self.step():
                time.sleep(POLL_SECONDS)
        except Exception as exc:
            self.store.add_event(events_key(self.name), "error", traceback.format_exc())
            self._stop_trials(f"the tuning job failed: {exc}")
            self.tuning.set_status(self.name, "Failed", end_time=time.time(),
                                   failure_reason=f"InternalServerError: {type(exc).__name__}: {exc}")

    def step(self) -> bool:
        """One look at every trial, then what follows from it; True once the tuning job has ended."""
        from shipyard.control.reconcile import reconcile
        from shipyard.tuning.completion import reason_to_complete, reason_to_fail

        record = self.tuning.get(self.name)
        if record.terminal:
            return True
        self._start_recorded(ending=record.stop_requested or bool(record.completion_reason))
        configs = self._configs()
        jobs = {t.job: reconcile(self.store, t.job) for c in configs.values() for t in c.jobs if t.state == "running"}
        # An ended job's curve no longer changes: read once.
        self.curves = {t.job: self.curves[t.job] if t.state == "ended" and t.job in self.curves else self._curve(t)
                       for c in configs.values() for t in c.jobs}
        for job, record_ in jobs.items():
            if record_.terminal:
                self._ended(configs, job)
        if record.stop_requested and record.status == "InProgress":
            self.tuning.set_status(self.name, "Stopping")
            record = self.tuning.get(self.name)
        running = [j for j, r in jobs.items() if not r.terminal]
        if record.status == "Stopping" or record.completion_reason:
            self._stop_trials("the tuning job was stopped" if record.status == "Stopping" else
                              f"the tuning job completed: {record.completion_reason}")
            if not running:
                self.tuning.set_status(self.name, "Stopped" if record.status == "Stopping" else "Completed",
                                       end_time=time.time())
                return True
            return False
        failure = reason_to_fail(self._ended_statuses(), self.spec.total_jobs())
        if failure:
            self._stop_trials(f"the tuning job failed: {failure}")
            self.tuning.set_status(self.name, "Failed", end_time=time.time(), failure_reason=failure)
            return True
        for job in running:
            self._watch(configs, job)
        stopping = self._count_costs(jobs)
        reason = reason_to_complete(self.spec, self._ended_objectives(), time.time() - record.creation_time,
                                    self.spent, stopping)
        if reason:
            self.tuning.update(self.name, completion_reason=reason)
            self.store.add_event(events_key(self.name), "info", f"completing: {reason}")
            return False
        self._launch(sum(t.state != "ended" for t in self.tuning.trials(self.name)))
        if all(t.state == "ended" for t in self.tuning.trials(self.name)):  # and nothing more to start
            self.tuning.set_status(self.name, "Completed", end_time=time.time(),
                                   completion_reason="MaxNumberOfTrainingJobs reached")
            return True
        return False

    # -- reading the trials --------------------------------------------------------------------
    def _configs(self) -> dict[int, Config]:
        configs: dict[int, Config] = {}
        for trial in self.tuning.trials(self.name):
            configs.setdefault(trial.number, Config(_proposal(trial))).jobs.append(trial)
        return configs

    def _ended_objectives(self) -> list[float]:
        """The final objectives of the trials that ended, in the order they ended."""
        for trial in self.tuning.trials(self.name):
            if trial.state == "ended" and trial.job not in self.ended:
                self.ended[trial.job] = ((self.store.get_job(trial.job).training_end_time or 0.0, self._final(trial))
                                         if self.store.exists(trial.job) else None)
        ended = sorted((v for v in self.ended.values() if v is not None), key=lambda v: v[0])
        return [final for _, final in ended if final is not None]

    def _ended_statuses(self) -> list[str]:
        """The statuses of the trials' jobs that ended (read once each: an ended job's no longer changes)."""
        for trial in self.tuning.trials(self.name):
            if trial.state == "ended" and trial.job not in self.statuses and self.store.exists(trial.job):
                self.statuses[trial.job] = self.store.get_job(trial.job).status
        return list(self.statuses.values())

    def _points(self, trial, spec=None) -> list[dict]:
        """What the trial's job emitted of its definition's objective (of `spec`'s: a parent's)."""
        metric = (spec or self.spec).definition(trial.definition).objective_metric_name
        return self.store.metrics(trial.job, metric)

    def _count_costs(self, jobs: dict) -> float:
        """With max_cost: what every trial has cost (self.spent; an ended trial's figure is read once),
        and returns what stopping the running ones would add (their grace and a margin, at their price)."""
        if self.spec.max_cost is None:
            return 0.0
        from shipyard.control.billing import prices, rate
        from shipyard.control.describe import OWN, describe_record

        priced, running, stopping = prices(), {}, 0.0
        for job, record in jobs.items():
            cost = describe_record(self.store, record)[OWN].get("Cost", {}).get("Amount", 0.0)
            if record.terminal:
                self.costs[job] = cost
            else:
                running[job] = cost
                stopping += rate(record.spec, priced) * (record.spec.stop_grace_seconds + STOP_MARGIN_SECONDS)
        for trial in self.tuning.trials(self.name):   # ended before this controller looked (a restart)
            if trial.state == "ended" and trial.job not in self.costs and self.store.exists(trial.job):
                record = self.store.get_job(trial.job)
                self.costs[trial.job] = describe_record(self.store, record)[OWN].get("Cost", {}).get("Amount", 0.0)
        self.spent = sum(self.costs.values()) + sum(running.values())
        return stopping

    def _curve(self, trial) -> list[float]:
        """The objective per epoch: each value one host emitted (the first host that emitted one), as
        Hyperband and the median rule read it; several hosts printing the same value count once."""
        points = self._points(trial)
        return [p["value"] for p in points if p["host"] == points[0]["host"]]

    def _final(self, trial, spec=None) -> float | None:
        """The latest value emitted, across instances (SageMaker's FinalHyperParameterTuningJobObjectiveMetric)."""
        points = self._points(trial, spec)
        return points[-1]["value"] if points else None

    def _config_curve(self, config: Config) -> list[float]:
        """A configuration's objective per epoch across its jobs: resumed jobs go on where the last
        stopped; restarted ones (Hyperband without resume) start again."""
        if self.spec.hyperband is not None and not self.spec.hyperband.resume:
            return self.curves.get(config.latest.job, [])
        return [v for t in config.jobs for v in self.curves.get(t.job, [])]

    # -- acting on running trials -------------------------------------------------------------
    def _watch(self, configs: dict[int, Config], job: str) -> None:
        config = next(c for c in configs.values() if any(t.job == job for t in c.jobs))
        curve = self._config_curve(config)
        if self.spec.strategy == "Hyperband":
            self._hyperband(configs, config, curve)
        elif self.spec.early_stopping_type == "Auto":
            self._median_rule(configs, config, curve)

    def _median_rule(self, configs: dict[int, Config], config: Config, curve: list[float]) -> None:
        from shipyard.tuning.early_stopping import median_rule

        job = config.latest.job
        earlier = [self._config_curve(c) for c in configs.values() if c.jobs[0].seq < config.jobs[0].seq
                   and c.proposal.definition == config.proposal.definition]  # the same objective
        for epoch in range(self.checked.get(job, 0) + 1, len(curve) + 1):
            self.checked[job] = epoch
            reason = median_rule(curve[epoch - 1], epoch, earlier, self.minimize)
            if reason:
                self._stop(job, reason)
                return

    def _hyperband(self, configs: dict[int, Config], config: Config, curve: list[float]) -> None:
        from shipyard.tuning.strategies.hyperband import promotable, rungs

        trial, top = config.latest, self.spec.max_resource()
        if trial.stop_reason:
            return
        if len(curve) >= top and not self.spec.ends_at_max_resource():
            self._stop(trial.job, f"Hyperband: reached max_resource ({top} epochs)")
            return
        for rung in rungs(self.spec.min_resource(), top):
            if rung <= trial.rung or rung > len(curve):
                continue
            value = curve[rung - 1]
            competing = self._at_rung(configs, rung)
            if not promotable(value, competing, self.minimize):
                self.tuning.update_trial(self.name, trial.job, rung=rung)
                self._stop(trial.job, f"Hyperband: paused at {rung} epochs: objective {value:.6g} is not in the "
                           f"top third of the {len(competing)} trials that reached it", paused=True)
                return
            self.tuning.update_trial(self.name, trial.job, rung=rung)

    def _at_rung(self, configs: dict[int, Config], rung: int) -> list[float]:
        return [curve[rung - 1] for curve in map(self._config_curve, configs.values()) if len(curve) >= rung]

    def _stop(self, job: str, reason: str, paused: bool = False) -> None:
        self.tuning.update_trial(self.name, job, stop_reason=reason, paused=int(paused))
        self.store.request_stop(job, reason)
        self.store.add_event(events_key(self.name), "trial", f"{job}: {reason}")

    def _stop_trials(self, reason: str) -> None:
        for trial in self.tuning.trials(self.name):
            if trial.state != "ended" and self.store.exists(trial.job) and not trial.stop_reason:
                self._stop(trial.job, reason)

    def _ended(self, configs: dict[int, Config], job: str) -> None:
        """Count a trial's job that ended: the search learns its configuration's outcome (once)."""
        config = next(c for c in configs.values() if any(t.job == job for t in c.jobs))
        if not self.search.finished(config.proposal.number):
            self.search.tell(config.proposal.number, self._final(next(t for t in config.jobs if t.job == job)))
        self.tuning.update_trial(self.name, job, state="ended")

    # -- starting trials ----------------------------------------------------------------------
    def _launch(self, running: int) -> None:
        """Start trials while slots are free and something is left to start."""
        while running < self.spec.max_parallel_jobs and (self._promote() or self._new()):
            running += 1

    def _promote(self) -> bool:
        """Hyperband: resume a paused configuration that is now in the top third at the highest rung its
        epochs reach (a stop lands a few epochs after the rung: judged only where it paused, it could be
        promoted into a job paused again at once), the highest such rung first."""
        if self.spec.strategy != "Hyperband":
            return False
        from shipyard.tuning.strategies.hyperband import promotable, rungs

        configs, top = self._configs(), self.spec.max_resource()
        ready = []
        for config in configs.values():
            curve = self._config_curve(config)
            if not (config.latest.paused and config.latest.state == "ended" and len(curve) < top):
                continue  # running, ended for good, or already trained to the end
            rung = max(r for r in rungs(self.spec.min_resource(), top) if r <= len(curve))
            if promotable(curve[rung - 1], self._at_rung(configs, rung), self.minimize):
                ready.append((rung, config))
        if not ready:
            return False
        rung, config = max(ready, key=lambda item: item[0])
        self._start(config.proposal, rung=rung, resumes=config)
        return True

    def _new(self) -> bool:
        numbers = {t.number for t in self.tuning.trials(self.name)}
        if len(numbers) >= self.spec.total_jobs():
            return False
        self._start(self.search.ask())
        return True

    def _start(self, proposal: Proposal, rung: int = 0, resumes: Config | None = None) -> None:
        from shipyard.tuning import trials

        seq = max((t.seq for t in self.tuning.trials(self.name)), default=0) + 1
        job = trials.job_name(self.name, seq)
        self.tuning.add_trial(self.name, job, proposal.number, proposal.definition, proposal.hyperparameters,
                              rung=rung, resumes=resumes.latest.job if resumes else None)
        self._submit(job, proposal, resumes)

    def _start_recorded(self, ending: bool) -> None:
        """Trials recorded by a process that died before starting their jobs, and configurations the
        study gave out that were never recorded: each started once, unless the tuning job is ending."""
        trials = self.tuning.trials(self.name)
        configs = self._configs()
        for trial in trials:
            if trial.state == "submitting" and ending and not self.store.exists(trial.job):
                self.tuning.update_trial(self.name, trial.job, state="ended", stop_reason="never started: the "
                                         "tuning job was ending")
            elif trial.state == "submitting":
                config = configs[trial.number]
                earlier = config.jobs[:config.jobs.index(trial)]
                self._submit(trial.job, config.proposal, Config(config.proposal, earlier) if earlier else None)
        for proposal in () if ending else self.search.unclaimed({t.number for t in trials}):
            self._start(proposal)

    def _submit(self, job: str, proposal: Proposal, resumes: Config | None) -> None:
        from shipyard.control.submit import submit
        from shipyard.tuning import trials

        if not self.store.exists(job):
            definition = self.spec.definition(proposal.definition)
            first = resumes.jobs[0].job if resumes and self.spec.hyperband.resume else job
            budget = None if self.spec.max_cost is None else self.spec.max_cost - self.spent
            submit(self.store, trials.trial_spec(definition, job, proposal.hyperparameters,
                                                 trials.checkpoint_uri(self.spec, definition, first), budget))
        self.tuning.update_trial(self.name, job, state="running")
        self.store.add_event(events_key(self.name), "trial", f"{job}: started" + (f", resuming {resumes.latest.job}"
                                                                   if resumes else ""))

    # -- warm start -----------------------------------------------------------------------------
    def _warm_start(self) -> None:
        """Teach the search the parents' trials (their tuned values and final objectives)."""
        if self.spec.warm_start is None:
            return
        for parent in self.spec.warm_start.parents:
            spec = self.tuning.get(parent).spec
            for trial in self.tuning.trials(parent):
                value = self._final(trial, spec)
                if value is not None:
                    self.search.seed(trial.job, trial.definition, trial.hyperparameters, value)


def _proposal(trial) -> Proposal:
    return Proposal(trial.number, trial.hyperparameters, trial.definition)


def study_path(store, name: str) -> Path:
    from shipyard.store.tuning import TuningStore

    directory = TuningStore(store).directory(name)
    directory.mkdir(parents=True, exist_ok=True)
    return directory / "study.db"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m shipyard.tuning.controller TUNING_JOB", file=sys.stderr)
        return 2
    TuningController(shipyard_home(), args[0]).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
