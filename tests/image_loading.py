"""One file at a time through etl/images/loading.py's checks and JPEG decode, as the
tests call them: the job runs the same functions inside its shard step."""

from __future__ import annotations

import numpy as np

from etl.images import loading
from etl.images.loading import InputLimits


def validate_image_bytes(data: bytes, limits: InputLimits | None = None
                         ) -> tuple[str, str] | None:
    """``(reason, message)`` if ``loading.check_image`` refuses ``data`` before the
    transform (with ``limits``, default the job's), else None."""
    checked = loading.check_image(data, limits or InputLimits())
    return None if isinstance(checked, loading.Checked) else checked


def decode_jpeg_checked(data: bytes, image_size: int, strict: bool
                        ) -> np.ndarray | tuple[str, str] | None:
    """A JPEG's one decode for ``image_size`` px output, into a buffer of its own
    (``loading.plan_jpeg_decode``, ``loading.decode_jpeg_into``): its pixels, a
    refusal, or None where the transform decodes it (with ``strict``, after
    ``loading.corrupt_data_problem``'s check of a layout outside the agreeing ones)."""
    plan = loading.plan_jpeg_decode(data, image_size)
    if plan is None:
        return loading.corrupt_data_problem(data, "jpeg") if strict else None
    return loading.decode_jpeg_into(data, plan, loading.aligned_buffer(plan.nbytes), strict)
