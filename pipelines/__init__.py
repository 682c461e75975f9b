"""Runnable jobs (``python -m pipelines.images``, ``python -m pipelines.timeseries``).

``images`` and ``timeseries`` wire each job; ``common`` is the run flow they share;
``arguments`` declares their flags (``--help`` needs neither Beam nor TensorFlow),
``flags`` refuses unknown ones and ``runner_defaults`` sets the runner's; ``summary``
prints the end-of-job summary; ``failures`` and ``held_reports`` turn a run's failure
into one line; ``command`` exits as a plain interpreter; ``quiet_start`` starts
TensorFlow without its start-up lines and ``worker_start`` sets up each SDK harness;
``testing`` runs a job inside a user's test.

Importing the package imports nothing heavy: TensorFlow starts when a job module is
imported.
"""
