"""Checks that a training install without TensorFlow reads our datasets.

1. Runs both jobs with ``--compression=none`` (this checkout's .venv) on small
   generated inputs: photos with one class each, the same photos with tag sets
   (multi-label), and three time series.
2. Makes an empty venv (Python 3.11's own ``venv``: no system site-packages, nothing
   of .venv) and runs in it, from the repository root, the TF-free install command
   docs/READER.md gives (the line after ``<!-- tf-free-install -->``), offline from the
   pip wheel cache ``.clusters/cache/pip/`` that ``scripts/checks/clean_install.sh``
   fills (``clean_install.py``'s ``empty_venv`` and ``pip_install_cached``).
3. In that venv, checks TensorFlow is not installed, and reads every record of every
   split of the three datasets with ``reader.records.ShardedRecords``.
4. Installs grain there and reads one shuffled epoch of the image dataset through
   ``grain.MapDataset.source(ShardedRecords(...))``: every key once, TF still absent.
5. With ``--torch``: also installs torch 2.13.0 (CPU) there and runs
   ``scripts/train_torch_dataloader.py`` on the image dataset (docs/READER.md shows
   its output), and READER.md's "From PyTorch" snippet as written.

    .venv/bin/python scripts/checks/tf_free_reader.py [--torch] [--keep DIR]

Needs the package index only for what the cache lacks (the first time: grain, and
this project's build requirements; torch always). Exits non-zero, saying why, on any
failure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MARKER = "<!-- tf-free-install -->"
TAGS = ["cat", "dog", "sky"]
READ_ALL = """
import json, sys
try:
    import tensorflow
    sys.exit("tensorflow is importable in the TF-free venv")
except ImportError:
    pass
from reader.records import ShardedRecords
counts = {}
for data_dir in sys.argv[1:]:
    for split in ("train", "validation", "test"):
        records = ShardedRecords(data_dir, split)
        items = [records[i] for i in range(len(records))]
        counts[f"{data_dir.rsplit('/', 1)[-1]}/{split}"] = len(items)
        assert len({item["key"] if "key" in item else i
                    for i, item in enumerate(items)}) == len(items)
print(json.dumps(counts))
assert "tensorflow" not in sys.modules
"""
GRAIN_EPOCH = """
import sys
import grain
from reader.records import ShardedRecords
records = ShardedRecords(sys.argv[1], "train", features=["key"])
keys = list(grain.MapDataset.source(records).seed(0).shuffle().map(lambda r: r["key"]))
assert sorted(keys) == sorted(records[i]["key"] for i in range(len(records))), keys
assert len(set(keys)) == len(records) and "tensorflow" not in sys.modules
print(f"grain: one shuffled epoch of {len(keys)} records, every key once, no tensorflow")
"""


def reader_md_snippet(section: str) -> str:
    """The first ```python block under docs/READER.md's ``### <section>`` heading."""
    with open(os.path.join(REPO, "docs", "READER.md")) as f:
        text = f.read()
    after = text[text.index(f"\n### {section}\n"):]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def install_command() -> str:
    """The TF-free install command of docs/READER.md."""
    with open(os.path.join(REPO, "docs", "READER.md")) as f:
        lines = f.read().splitlines()
    at = lines.index(MARKER)
    command = next(line for line in lines[at + 1:] if line.strip().startswith("pip "))
    return command.strip()


def write_inputs(root: str) -> tuple[str, str, str]:
    """(photo folder, multi-label JSONL, time-series JSONL) under ``root``."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(48):
        label = TAGS[i % 3]
        os.makedirs(os.path.join(root, "photos", label), exist_ok=True)
        y, x = np.mgrid[0:60, 0:80]
        pixels = np.stack([x * 3, y * 4, (x + y) * 2], -1) + rng.normal(0, 20, (60, 80, 3))
        path = f"photos/{label}/{i:03d}.jpg"
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(
            os.path.join(root, path), quality=90)
        rows.append({"path": path, "tags": [t for j, t in enumerate(TAGS) if (i >> j) & 1]})
    tags = os.path.join(root, "tags.jsonl")
    with open(tags, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    series = os.path.join(root, "series.jsonl")
    with open(series, "w") as f:
        for s in range(3):
            for t in range(200):
                f.write(json.dumps({"series_id": f"s{s}", "timestamp": t,
                                    "value": float(np.sin(t / 5) * (s + 1))}) + "\n")
    return os.path.join(root, "photos"), tags, series


def run(command: list[str], **kwargs) -> str:
    print("+", shlex.join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        sys.exit(f"FAILED ({done.returncode}): {shlex.join(command)}\n{done.stdout[-3000:]}"
                 f"\n{done.stderr[-3000:]}")
    return done.stdout


def make_datasets(root: str) -> list[str]:
    photos, tags, series = write_inputs(root)
    jobs = {
        "images": ["pipelines.images", f"--input={photos}", "--image_size=64"],
        "multi_label": ["pipelines.images", f"--input={tags}", "--multi_label",
                        "--label_column=tags", "--image_format=png", "--image_size=32"],
        "timeseries": ["pipelines.timeseries", f"--input={series}", "--window_size=8",
                       "--horizon=2"],
    }
    outputs = []
    for name, (module, *flags) in jobs.items():
        out = os.path.join(root, name)
        run([sys.executable, "-m", module, *flags, f"--output_dir={out}",
             "--compression=none", "--num_shards=2"])
        outputs.append(out)
    return outputs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", action="store_true")
    parser.add_argument("--keep", help="work here (kept) instead of a temp folder")
    args = parser.parse_args()
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        return check(args.keep, args.torch)
    with tempfile.TemporaryDirectory(prefix="tf_free_reader.") as work:
        return check(work, args.torch)


def copy_checkout(dest: str) -> str:
    """The checkout's files as a clone holds them (tracked, and untracked ones git does
    not ignore) copied to ``dest``; returns ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for relative in filter(None, listed):
        source = os.path.join(REPO, relative)
        if os.path.isfile(source):
            os.makedirs(os.path.dirname(os.path.join(dest, relative)), exist_ok=True)
            shutil.copy2(source, os.path.join(dest, relative))
    return dest


def check(work: str, with_torch: bool) -> int:
    """Runs the checks in ``work``; exits with the reason on a failure."""
    sys.path.insert(0, REPO)
    from scripts.checks.clean_install import check_isolated, empty_venv, pip_install_cached

    datasets = make_datasets(os.path.join(work, "data"))
    python = empty_venv(os.path.join(work, "venv"))
    command = install_command()
    print(f"READER.md's TF-free install: {command}")
    if not command.startswith("pip install "):
        sys.exit(f"READER.md's TF-free install command is not a pip install: {command}")
    # In a clean copy, as a fresh clone would run it: pip builds `.` in place, which
    # leaves build/ and egg-info in the folder (in this checkout, build/ then turns
    # up as a namespace package named "build" for the jobs run from it).
    pip_install_cached(python, shlex.split(re.sub(r"^pip install ", "", command)),
                       cwd=copy_checkout(os.path.join(work, "checkout")))
    check_isolated(python)
    installed = run([python, "-m", "pip", "list", "--format=freeze"])
    print("installed in the TF-free venv:", " ".join(installed.split()))
    outside = os.path.join(work, "elsewhere")  # not the checkout: the installed package
    os.makedirs(outside, exist_ok=True)
    print(run([python, "-c", READ_ALL, *datasets], cwd=outside).strip())
    pip_install_cached(python, ["grain"])
    print(run([python, "-c", GRAIN_EPOCH, datasets[0]], cwd=outside).strip())
    if with_torch:
        run([python, "-m", "pip", "install", "--quiet", "torch==2.13.0"])
        print(run([python, os.path.join(REPO, "scripts", "train_torch_dataloader.py"),
                   datasets[0]], cwd=outside).strip())
        snippet = reader_md_snippet("From PyTorch").replace("out/images", datasets[0])
        run([python, "-c", snippet + "\nprint(images.shape, labels.dtype)\n"], cwd=outside)
        print("READER.md's PyTorch snippet ran as written")
    print(f"OK: a venv without TensorFlow read {len(datasets)} datasets ({work})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
