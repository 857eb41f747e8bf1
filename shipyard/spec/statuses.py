"""A job's statuses (DescribeTrainingJob's TrainingJobStatus and SecondaryStatus), apart from the job
models: the store and the capacity queue read them without loading pydantic."""

SECONDARY_BY_PRIMARY = {
    "InProgress": ("Starting", "Pending", "Downloading", "Training", "Interrupted", "Uploading"),
    "Completed": ("Completed",),
    "Failed": ("Failed",),
    "Stopping": ("Stopping",),
    "Stopped": ("Stopped", "MaxRuntimeExceeded", "MaxWaitTimeExceeded"),
}
STATUSES = tuple(SECONDARY_BY_PRIMARY)
TERMINAL_STATUSES = frozenset({"Completed", "Failed", "Stopped"})


def status_named(value: str) -> str | None:
    """The status `value` names in any case ("completed"), or None."""
    return next((status for status in STATUSES if status.lower() == value.lower()), None)
