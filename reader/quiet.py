"""TensorFlow's C++ log level: warnings and notes hidden unless the user chose a level.

TensorFlow reads ``TF_CPP_MIN_LOG_LEVEL`` once, as it starts, and its C++ code then
logs warnings such as grappler's ``op_level_cost_estimator`` one for the augmentation's
``CropAndResize`` every time a pipeline is optimised. ``import reader`` (and the jobs,
``pipelines/quiet_start.py``) set the level to 2 (warnings and notes hidden, errors
shown) for this process and those it starts, unless the user set it: their value wins.
Setting it after TensorFlow has started changes nothing, so it takes effect when
``reader`` is imported before ``tensorflow`` (or when the user sets it themselves).
"""

from __future__ import annotations

import os
import sys

LOG_LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"
QUIET_LEVEL = "2"
# The level as the user set it, read before this module sets its own (None: unset).
USER_LEVEL = os.environ.get(LOG_LEVEL_ENV)


def quiet_tensorflow_logs() -> None:
    """Sets ``TF_CPP_MIN_LOG_LEVEL`` to 2 unless the user set it or TensorFlow has
    already started (it would not read it again); imports nothing."""
    if USER_LEVEL is None and LOG_LEVEL_ENV not in os.environ and (
            "tensorflow" not in sys.modules):
        os.environ[LOG_LEVEL_ENV] = QUIET_LEVEL
