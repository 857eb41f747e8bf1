"""The job controller: one process per job that owns its lifecycle and records every transition."""

PLAN_FILE = "plan.json"     # written by the submitting client (planning.py), read by the controller
