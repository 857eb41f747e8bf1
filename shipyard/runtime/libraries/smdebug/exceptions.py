"""smdebug's exceptions, as smdebug.trials raises them. The lookups are KeyErrors, as shipyard's own
trial's TensorUnavailable is."""


class TensorUnavailable(KeyError):
    """No tensor of that name was saved."""


class TensorUnavailableForStep(KeyError):
    """The tensor was not saved at that step (or not raw, for its value)."""


class StepUnavailable(KeyError):
    """No step of that number was saved."""


class NoMoreData(Exception):
    """The training job has ended: the steps waited for will never be saved."""


__all__ = ["NoMoreData", "StepUnavailable", "TensorUnavailable", "TensorUnavailableForStep"]
