"""The `shipyard` command line (click + rich). `main.py` holds the commands; `jobfile.py` turns a job.yaml
and the `run` options into Estimator arguments. Heavy modules are imported inside commands so that
`shipyard --help` stays fast."""
