"""`trial(job_name_or_path)`: a trial (shipyard.contract.debugger.trials) over a job's saved tensors, by the
job's name (its <output_path>/<job>/debug-output/) or a path/URI."""

from __future__ import annotations

from shipyard.contract.debugger.trials import Tensor, TensorUnavailable, Trial

__all__ = ["Tensor", "TensorUnavailable", "Trial", "trial"]


def trial(job_name_or_path: str) -> Trial:
    """A trial over a job's tensors (by job name) or over a directory/URI holding them."""
    from shipyard.spec.debugger import debug_output_uri
    from shipyard.storage.uri import exists

    if "/" not in job_name_or_path and not exists(job_name_or_path):
        from shipyard.store.db import Store

        spec = Store().get_job(job_name_or_path).spec
        hook = spec.debugger_hook_config
        return Trial(debug_output_uri(spec.output_path, spec.job_name, hook.s3_output_path if hook else None))
    return Trial(job_name_or_path)
