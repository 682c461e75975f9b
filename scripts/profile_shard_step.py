"""Where the image job's shard step spends its CPU: a `perf` profile, by library.

Runs the image job (default flags and runner, one TensorFlow thread per op as the job
sets it) on --num_images photo-sized JPEGs (scripts/sample_photos.py) under
``perf record`` (Linux perf; it must be installed and allowed:
/proc/sys/kernel/perf_event_paranoid <= 2 for a process of one's own), notes when the
local runner starts and ends the shard step (the stage that reads, checks,
transforms and writes every image), and reports the shares of CPU samples taken in
that window by shared object, grouped:

  tensorflow   TensorFlow's ops (decode, resize, encode, EXIF; libtensorflow*)
  strict_check simplejpeg's libjpeg-turbo (the strict check of JPEG data)
  zlib         deflate and CRC of the GZIP shard files
  python       the interpreter (Beam, the step's own Python, protobuf glue)
  libc         memory copies and allocation
  kernel       system calls, page faults, scheduling
  other        everything else

Usage: python scripts/profile_shard_step.py --work_dir /work/bench_data \\
           --out docs/benchmarks/shard_step_profile.json [-- extra job flags]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from bench_common import (
    REPO_ROOT,
    SHARD_STEP_STAGE,
    TIME_STAGES,
    code_commit,
    job_env,
    machine,
    read_json,
    read_manifest,
    write_json,
)
from sample_photos import ensure_photos

# Runs the image job on argv[1] (JSON) and writes the shard step's CLOCK_MONOTONIC
# windows (perf's clock below) as JSON to argv[2].
_DRIVER = TIME_STAGES + r"""
import json, sys
from pipelines import images
images.run(json.loads(sys.argv[1]))
with open(sys.argv[2], "w") as f:
    json.dump([(start, end) for name, start, end in stage_windows
               if SHARD_STEP_STAGE in name], f)
""".replace("SHARD_STEP_STAGE", repr(SHARD_STEP_STAGE))

GROUPS = (
    ("tensorflow", re.compile(r"^libtensorflow|^_pywrap_tf|tensorflow")),
    ("strict_check", re.compile(r"^_jpeg\.cpython|simplejpeg")),
    ("zlib", re.compile(r"^libz\.|^zlib")),
    ("python", re.compile(r"^libpython|^python")),
    ("libc", re.compile(r"^libc\.|^libstdc\+\+|^ld-linux")),
    ("kernel", re.compile(r"^\[kernel")),
)


def group_of(dso: str) -> str:
    return next((name for name, pattern in GROUPS if pattern.search(dso)), "other")


def dso_shares(perf_data: str, start: float, end: float) -> dict[str, float]:
    """Percent of samples per shared object in [start, end] (perf report)."""
    report = subprocess.run(
        ["perf", "report", "-i", perf_data, "--time", f"{start:.6f},{end:.6f}",
         "--sort", "dso", "--no-children", "--stdio", "-g", "none"],
        capture_output=True, text=True, check=True).stdout
    shares = {}
    for line in report.splitlines():
        match = re.match(r"\s*([\d.]+)%\s+(\S.*?)\s*$", line)
        if match and not line.lstrip().startswith("#"):
            shares[match.group(2)] = float(match.group(1))
    return shares


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(),
                                                           "bench_photos"))
    parser.add_argument("--out", default="docs/benchmarks/shard_step_profile.json")
    parser.add_argument("--num_images", type=int, default=2000)
    parser.add_argument("--frequency", type=int, default=999, help="perf samples/s.")
    parser.add_argument("job_flags", nargs="*", help="Extra flags for the job.")
    args = parser.parse_args()
    if shutil.which("perf") is None:
        sys.exit("perf is not installed (Debian: apt-get install linux-perf).")

    root = ensure_photos(args.work_dir, args.num_images)
    with tempfile.TemporaryDirectory() as tmp:
        perf_data = os.path.join(tmp, "perf.data")
        windows_path = os.path.join(tmp, "windows.json")
        output_dir = os.path.join(tmp, "out")
        argv = [f"--input={root}", f"--output_dir={output_dir}", *args.job_flags]
        proc = subprocess.run(
            ["perf", "record", "-k", "CLOCK_MONOTONIC", "-F", str(args.frequency),
             "-o", perf_data, "--", sys.executable, "-c", _DRIVER, json.dumps(argv),
             windows_path],
            cwd=REPO_ROOT, env=job_env(), capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"perf record or the job failed:\n{proc.stderr[-3000:]}")
        (start, end), = read_json(windows_path)
        rejected = read_manifest(output_dir)["rejected"]["count"]
        shares = dso_shares(perf_data, start, end)
    groups: dict[str, float] = {}
    for dso, share in shares.items():
        groups[group_of(dso)] = groups.get(group_of(dso), 0.0) + share
    for name, share in sorted(groups.items(), key=lambda item: -item[1]):
        print(f"{name:<13}{share:6.1f} %")
    print(f"shard step: {end - start:.2f} s for {args.num_images} photos "
          f"({rejected} rejected)")
    commit = code_commit()
    write_json(args.out, {
        "date": time.strftime("%Y-%m-%d"), "code_commit": commit,
        "machine": machine(),
        "input": {"photos": args.num_images, "job_flags": args.job_flags},
        "shard_step_s": end - start, "rejected": rejected,
        "percent_of_samples_by_group": groups, "percent_of_samples_by_dso": shares,
        "definitions": {"percent": "share of perf's CPU samples (all threads of the job) "
                                   "taken while the shard step ran"},
    })
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
