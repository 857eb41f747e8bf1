"""The job controller: one process per job that owns its lifecycle and records every transition."""
