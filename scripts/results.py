"""Writing a measurement script's results: one sorted, indented JSON file."""

from __future__ import annotations

import json
import os
from typing import Any


def write_json(path: str, result: dict[str, Any]) -> None:
    """Writes ``result`` to ``path`` (parent folders created), keys sorted so that
    reruns diff cleanly."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=2, sort_keys=True)
