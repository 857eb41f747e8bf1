"""Built-in profiler rules, each a module registered by SageMaker's name in shipyard/spec/rules.py. Each module
declares PARAMETERS (SageMaker's names and defaults), DESCRIPTION and RECOMMENDATION (the report's
rules table), and `evaluate(data, params, now, final) -> Finding` over everything collected so far.
Also here: data.py and operators.py (reading what the instances recorded), watcher.py (rules beside a
job), report.py, charts.py and templates/ (the HTML profiling report)."""
