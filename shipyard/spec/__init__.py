"""Frozen models of what a job is: the request a user submits, validated before anything runs."""
