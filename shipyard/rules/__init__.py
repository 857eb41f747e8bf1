"""What the controller runs beside a job: debugger rules (shipyard/rules/debugger/, with the trial API they
read tensors with) and profiler rules (shipyard/rules/profiler/, with the reader of the profiler's data,
the watcher and the HTML report). Rules are registered by name in shipyard/spec/rules.py (RULES); each
rule module declares PARAMETERS (name -> Parameter, SageMaker's names, types and defaults) and
COLLECTIONS (the debugger collections it needs saved), and may define check(values) raising ValueError
for parameters that only make sense together (AllZero needs collection_names or tensor_regex). Specs
validate against these declarations without running anything, so importing a rule module must stay
cheap (no torch at module level)."""
