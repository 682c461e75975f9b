"""Runnable Beam jobs: ``python -m pipelines.images`` (and more to come)."""
