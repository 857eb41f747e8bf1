"""The job database: jobs, their status transitions, events and metrics (SQLite under SHIPYARD_HOME, its
schema in store/migrations.py), and each job's directory (per-host logs, instance trees)."""

from shipyard.store.db import JobRecord, Store, shipyard_home

__all__ = ["JobRecord", "Store", "shipyard_home"]
