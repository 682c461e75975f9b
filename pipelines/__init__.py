"""Runnable jobs (``python -m pipelines.images``, ``python -m pipelines.timeseries``)."""

from pipelines.quiet_start import import_tensorflow_quietly

import_tensorflow_quietly()
