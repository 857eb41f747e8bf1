"""A submitted training job, as SageMaker's `_TrainingJob`: describe, stop, update (its warm pool and its
profiling), wait, logs."""

from __future__ import annotations

from typing import Any

from shipyard.errors import UnexpectedStatusError


class TrainingJob:
    def __init__(self, name: str, store=None) -> None:
        from shipyard.store import Store

        self.name = self.job_name = name
        self.store = store or Store()

    def describe(self) -> dict:
        from shipyard.control.describe import describe

        return describe(self.store, self.name)

    def stop(self) -> None:
        from shipyard.control.reconcile import reconcile

        reconcile(self.store, self.name)
        self.store.request_stop(self.name)

    def update(self, keep_alive_period_in_seconds: int) -> None:
        """UpdateTrainingJob's ResourceConfig.KeepAlivePeriodInSeconds: how long the job's warm pool stays
        Available after the job, counted from its end; 0 releases it."""
        from shipyard.control.pools import reconcile_pools
        from shipyard.errors import ValidationError
        from shipyard.spec.job import MAX_KEEP_ALIVE
        from shipyard.store.pools import PoolStore

        if not 0 <= keep_alive_period_in_seconds <= MAX_KEEP_ALIVE:
            raise ValidationError("keep_alive_period_in_seconds", keep_alive_period_in_seconds,
                                  f"must be 0-{MAX_KEEP_ALIVE} seconds; 0 releases the warm pool")
        self._check_budget(keep_alive_period_in_seconds)
        reconcile_pools(self.store)
        PoolStore(self.store).update_keep_alive(self.name, keep_alive_period_in_seconds)

    def _check_budget(self, keep_alive: int) -> None:
        """A warm pool's retention is billed to its job: no longer than its max_cost pays for."""
        from shipyard.control.billing import keep_alive_within, prices
        from shipyard.control.describe import OWN
        from shipyard.errors import ValidationError

        spec = self.store.get_job(self.name).spec
        if spec.max_cost is None:
            return
        cost = self.describe()[OWN].get("Cost", {})
        running = cost.get("Amount", 0.0) - cost.get("WarmPoolRetainedAmount", 0.0)
        affordable = int(keep_alive_within(spec, running, prices()))
        if keep_alive > affordable:
            raise ValidationError("keep_alive_period_in_seconds", keep_alive, f"max_cost ${spec.max_cost:,.2f} "
                                  f"leaves ${spec.max_cost - running:,.4f}: at most {affordable} s of warm pool")

    def enable_default_profiling(self):
        """System metrics every 500 ms and the ProfilerReport rule, on the running job (control/profiling.py)."""
        from shipyard.control import profiling

        return profiling.enable_default(self.store, self.name)

    def disable_profiling(self):
        from shipyard.control import profiling

        return profiling.disable(self.store, self.name)

    def update_profiler(self, rules=None, system_monitor_interval_millis: int | None = None,
                        s3_output_path: str | None = None, framework_profile_params=None,
                        disable_framework_metrics: bool = False):
        from shipyard.control import profiling

        return profiling.update(
            self.store, self.name, rules, system_monitor_interval_millis, s3_output_path,
            profiling.KEEP if framework_profile_params is None else framework_profile_params,
            disable_framework_metrics)

    def wait(self, logs: Any = "All", quiet: bool = False) -> dict:
        """Block until the job ends; with logs, show its log lines and status changes as they happen.
        A job that ends other than Completed raises, except Stopped, which only warns (as SageMaker)."""
        description = self._follow(show_logs=logs not in (False, None, "None"), quiet=quiet)
        status = description["TrainingJobStatus"]
        if status == "Stopped":
            import warnings

            warnings.warn(f"job {self.name} was stopped ({description['SecondaryStatus']})", stacklevel=2)
        elif status != "Completed":
            raise UnexpectedStatusError(self.name, status, description.get("FailureReason"))
        return description

    def _follow(self, show_logs: bool, quiet: bool) -> dict:
        """Status changes (and log lines) printed until the job ends; its description then."""
        from shipyard.sdk.watch import log_console, watch

        return watch(self.store, self.name, show_logs=show_logs, console=log_console(quiet=quiet))

    def logs(self) -> None:
        from shipyard.sdk.watch import print_logs

        print_logs(self.store, self.name)


class ClusterTrainingJob(TrainingJob):
    """A job whose record and controller live on the Ray cluster's home (controller="cluster"), read and
    stopped through it from any machine that reaches the cluster (control/cluster_home.py). What it prints is
    what the same command prints there."""

    def __init__(self, name: str) -> None:
        self.name = self.job_name = name
        self.store = None

    def describe(self) -> dict:
        from shipyard.control import cluster_home as home

        return home.describe(self.name)

    def stop(self) -> None:
        self._run(["stop", self.name], quiet=True)

    def update(self, keep_alive_period_in_seconds: int) -> None:
        self._not_here("update(keep_alive_period_in_seconds=...)", "such a job keeps no warm pool")

    def enable_default_profiling(self):
        self._not_here("enable_default_profiling()", "give profiler_config when submitting it")

    def disable_profiling(self):
        self._not_here("disable_profiling()", "give profiler_config when submitting it")

    def update_profiler(self, *args, **kwargs):
        self._not_here("update_profiler()", "give profiler_config when submitting it")

    def _not_here(self, what: str, instead: str) -> None:
        from shipyard.errors import ShipyardError

        raise ShipyardError(f"{what} is not available for job {self.name}, whose controller lives on the cluster "
                            f"(not built yet): {instead}")

    def _follow(self, show_logs: bool, quiet: bool) -> dict:
        self._run(["wait", self.name, *(["--logs"] if show_logs else [])], quiet=quiet, check=False)
        return self.describe()

    def logs(self) -> None:
        self._run(["logs", self.name], quiet=False)

    def _run(self, argv: list[str], quiet: bool, check: bool = True) -> None:
        import io

        from shipyard.control import cluster_home as home
        from shipyard.errors import ShipyardError

        errors = io.BytesIO()
        code = home.run(argv, stdout=io.BytesIO() if quiet else None, stderr=errors)
        if check and code != 0:
            raise ShipyardError(f"`shipyard {' '.join(argv)}` on the cluster's home: "
                                f"{errors.getvalue().decode(errors='replace').strip()}")
