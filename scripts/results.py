"""Writing a measurement script's results: one sorted, indented JSON file, and the
commit of the code they were measured on."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_json(path: str, result: dict[str, Any]) -> None:
    """Writes ``result`` to ``path`` (parent folders created), keys sorted so that
    reruns diff cleanly."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=2, sort_keys=True)


def code_commit() -> str:
    """The repository's HEAD commit (empty if git cannot tell)."""
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=_REPO_ROOT,
                          capture_output=True, text=True).stdout.strip()
