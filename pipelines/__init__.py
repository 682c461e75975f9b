"""Runnable jobs (``python -m pipelines.images``, ``python -m pipelines.timeseries``).

Importing the package imports nothing heavy: TensorFlow starts (quietly,
``quiet_start``) when a job module is imported, and ``--help`` needs neither
(``arguments``).
"""
