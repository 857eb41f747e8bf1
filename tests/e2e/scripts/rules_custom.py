"""A custom debugger rule for the end-to-end tests, shaped as SageMaker's custom rules are (a class taking
the trial and keyword parameters, given as strings, with invoke_at_step): fires at the first step whose
loss is below `threshold`."""


class LossBelow:
    def __init__(self, base_trial, threshold="1.0"):
        self.base_trial = base_trial
        self.threshold = float(threshold)
        self.finding = ""

    def invoke_at_step(self, step):
        for name in self.base_trial.tensor_names(step=step, collection="losses"):
            value = float(self.base_trial.tensor(name).value(step))
            if value < self.threshold:
                self.finding = f"tensor {name}: loss {value:.4g} < {self.threshold:g}"
                return True
        return False
