"""Resume benchmark: the image job killed at ~70 % of its shards and rerun, beside a full run.

On --num_images web-size photos (scripts/benchmarks/sample_photos.py), each round times four
``python -m pipelines.images`` commands (wall, interpreter start included):
  tiny     on --tiny_images photos: the fixed start-up cost both big runs pay;
  full     uninterrupted, into a fresh output dir;
  killed   into another dir with ETL_PAUSE_AT=shard_recorded:K, K = round(--kill_at x
           the full run's shard count); once stopped, its process group is SIGKILLed;
  resumed  into the killed run's dir again: kept / transformed shards and inputs
           transformed, from its summary line;
then checks that the resumed output is byte-identical to the full one (sha256 of every
shard the manifests list, manifest.json, errors/rejected.jsonl; the same file list).
Goal: the resumed run transforms at most --goal (0.35) of the inputs (worst round).

Shards are sized, not counted (--target_shard_mb 6: ~340 photos at 224 px per shard,
46 + 6 + 7 shards for 20,000). With a fixed --num_shards per split, validation and
test shards hold 8x fewer images than train ones, and the default runner finishes
most train shards first (in the order their keys are first seen): 42 of 60 such
shards held 91 % of 2,000 photos, so the fraction would measure the shard order, not
the resume. Equal-size shards make shards kept = images kept in any order; the plan
is a pure function of the input, the same for every run (counts in the JSON).

Each command waits up to --quiet_wait_s for other processes to use at most
--max_foreign cores, and records what they used meanwhile; nothing is retried (a
resumed run cannot be retaken without a new kill). Usage:
    python -m scripts.benchmarks resume --work_dir /tmp/bench_photos [--rounds 3]
"""

from __future__ import annotations

import argparse
import datetime
import glob
import hashlib
import json
import os
import pathlib
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from etl.core.run import fault_injection
from reader.format import contract
from scripts.benchmarks import harness
from scripts.benchmarks.sample_photos import describe, ensure_tree

BENCHMARK = harness.Benchmark(
    name="resume",
    measures="a killed image job rerun: the share of photos transformed again and its time",
    quick=("--work_dir", "{quick_dir}/photos", "--num_images", "200", "--tiny_images", "8",
           "--out", "{quick_dir}/resume.json"),
)


RESUMED_LINE = re.compile(r"resumed: (\d+) shard\(s\) kept from the interrupted run, "
                          r"(\d+) transformed \((\d+) inputs\)")
PROGRESS_SHARDS = os.path.join("progress", "shards")  # etl/core/run/resume.py's layout.


def run_job(tree: str, out: str, flags: Sequence[str], env: dict[str, str],
            stop_timeout_s: float | None = None) -> dict[str, str]:
    """Runs ``python -m pipelines.images`` on ``tree`` into ``out`` in a session of its
    own, stdout/stderr to files beside ``out`` (a full pipe would stall it); returns
    their text.

    With ``stop_timeout_s``, waits until the job stops itself (SIGSTOP, state T) and
    SIGKILLs its process group instead. Raises if it fails, or does not stop.
    """
    argv = [sys.executable, "-m", "pipelines.images", f"--input={tree}",
            f"--output_dir={out}", *flags]
    logs = {"stdout": out + ".out", "stderr": out + ".err"}
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(logs["stdout"], "w") as stdout, open(logs["stderr"], "w") as stderr:
        process = subprocess.Popen(argv, stdout=stdout, stderr=stderr, env=env,
                                   start_new_session=True)
    try:
        if stop_timeout_s is None:
            code = process.wait()
        else:
            deadline = time.monotonic() + stop_timeout_s
            while (code := process.poll()) is None:
                if _state(process.pid) == "T":
                    return {}  # Killed below.
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{out}: the job did not stop in {stop_timeout_s:.0f}"
                                       f" s (--stop_timeout_s).")
                time.sleep(0.05)
        if code != 0 or stop_timeout_s is not None:
            tail = pathlib.Path(logs["stderr"]).read_text().splitlines()[-15:]
            raise RuntimeError(f"{' '.join(argv)} exited {code}"
                               f"{' before stopping' if stop_timeout_s else ''}; the end of "
                               f"{logs['stderr']}:\n" + "\n".join(tail))
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # The job and any worker it started.
        process.wait()
    return {name: pathlib.Path(path).read_text() for name, path in logs.items()}


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def shard_records(out: str) -> list[dict[str, Any]]:
    """The finished-shard records a killed run left in ``out``."""
    paths = sorted(glob.glob(os.path.join(out, PROGRESS_SHARDS, "*.json")))
    return [harness.read_json(path) for path in paths]


def parse_resumed(stdout: str) -> tuple[int, ...]:
    """(kept shards, transformed shards, inputs transformed) from a job's summary."""
    found = RESUMED_LINE.search(stdout)
    if found is None:
        raise RuntimeError(f"No 'resumed: ...' line in the rerun's summary (did it keep "
                           f"no shard?); its stdout:\n{stdout}")
    return tuple(map(int, found.groups()))


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def output_digests(out: str) -> dict[str, str]:
    """sha256 of every shard the manifest in ``out`` lists, of the manifest and of the
    rejected-records file: what "byte-identical output" compares."""
    paths = [shard["path"] for entry in harness.read_manifest(out)["splits"].values()
             for shard in entry["shards"]]
    paths += [contract.MANIFEST_FILENAME,
              f"{contract.ERRORS_DIRNAME}/{contract.REJECTED_FILENAME}"]
    return {path: _sha256(os.path.join(out, path)) for path in sorted(paths)}


def files_under(out: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), out) for d, _, ns in os.walk(out) for n in ns)


def one_round(args: argparse.Namespace, tree: str, tiny_tree: str, out_root: str,
              flags: list[str]) -> dict[str, Any]:
    """Times tiny, full, killed and resumed runs; counts and compares their output."""
    full, killed, tiny = (os.path.join(out_root, name) for name in ("full", "killed", "tiny"))
    for path in (full, killed, tiny):
        shutil.rmtree(path, ignore_errors=True)
    env = {name: value for name, value in harness.job_env().items()
           if name != fault_injection.PAUSE_ENV}
    samples: dict[str, harness.Sample] = {}

    def timed(name: str, fn: Callable[[], dict]) -> dict:
        if args.quiet_wait_s:
            harness.wait_for_quiet(args.max_foreign, args.quiet_wait_s)
        samples[name] = harness.Sample(fn)
        return samples[name].extra

    timed("tiny", lambda: run_job(tiny_tree, tiny, flags, env))
    timed("full", lambda: run_job(tree, full, flags, env))
    manifest = harness.read_manifest(full)
    shards = {split: len(entry["shards"]) for split, entry in manifest["splits"].items()}
    total = sum(shards.values())
    pause = f"{fault_injection.SHARD_RECORDED}:{max(1, round(args.kill_at * total))}"
    if round(args.kill_at * total) >= total:
        raise ValueError(f"--kill_at {args.kill_at} of {total} shards leaves none to do.")
    timed("killed_until_kill", lambda: run_job(
        tree, killed, flags, {**env, fault_injection.PAUSE_ENV: pause},
        stop_timeout_s=args.stop_timeout_s))
    records = shard_records(killed)
    resumed = timed("resumed", lambda: run_job(tree, killed, flags, env))
    kept, transformed, inputs = parse_resumed(resumed["stdout"])
    full_digests, resumed_digests = output_digests(full), output_digests(killed)
    differing = sorted(p for p in full_digests.keys() | resumed_digests.keys()
                       if full_digests.get(p) != resumed_digests.get(p))
    return {
        "inputs": manifest["inputs"], "shards_per_split": shards, "shards": total,
        "pause_at": pause, "killed_shard_records": len(records),
        "killed_records_images": sum(r["num_records"] for r in records),
        "resumed_kept_shards": kept, "resumed_transformed_shards": transformed,
        "resumed_inputs_transformed": inputs,
        "fraction_transformed": inputs / manifest["inputs"],
        "wall_s": {name: round(sample.wall, 2) for name, sample in samples.items()},
        "foreign_cores": {name: round(s.foreign_cores, 3) for name, s in samples.items()},
        "byte_identical": not differing, "files_compared": len(full_digests),
        "differing_files": differing[:10],
        "same_file_list": files_under(full) == files_under(killed),
        "resume_stderr_lines": [line for line in resumed["stderr"].splitlines()
                                if line.startswith("[resume]")][:5],
    }


def summarize(rounds: list[dict[str, Any]], goal: float) -> dict[str, Any]:
    """Medians and best rounds of the wall times; the worst fraction against ``goal``."""
    walls = {name: harness.spread((r["wall_s"][name] for r in rounds), higher_is_better=False)
             for name in rounds[0]["wall_s"]}
    fractions = [r["fraction_transformed"] for r in rounds]
    summary: dict[str, Any] = {
        "wall_s": walls, "goal_max_fraction": goal,
        "fraction_transformed": {"worst": max(fractions),
                                 "median": statistics.median(fractions)},
        "verdict": "PASS" if max(fractions) <= goal else "FAIL",
        "byte_identical": all(r["byte_identical"] and r["same_file_list"] for r in rounds),
    }
    for kind in ("median", "best"):
        full, resumed, tiny = (walls[n][kind] for n in ("full", "resumed", "tiny"))
        summary[f"resumed_over_full_{kind}"] = round(resumed / full, 3)
        # The fixed start-up cost plus the transformed share of the full run's rest.
        summary[f"resumed_predicted_s_{kind}"] = round(
            tiny + statistics.median(fractions) * (full - tiny), 2)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(),
                                                           "bench_photos"),
                        help="Generated photos are kept (and reused) here; the runs' "
                             "outputs and logs go to <work_dir>/resume_out.")
    harness.add_result_flags(parser, "resume", "web_<num_images>")
    parser.add_argument("--num_images", type=int, default=20000)
    parser.add_argument("--tiny_images", type=int, default=32)
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--target_shard_mb", type=float, default=6.0,
                        help="Shard size of every run (equal-size shards: see above).")
    parser.add_argument("--num_shards", type=int, default=None,
                        help="Fixed shards per split instead of --target_shard_mb.")
    parser.add_argument("--kill_at", type=float, default=0.7,
                        help="Kill once this fraction of the shards is recorded.")
    parser.add_argument("--goal", type=float, default=0.35,
                        help="Most inputs (as a fraction) the resumed run may transform.")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--max_foreign", type=float, default=0.15)
    parser.add_argument("--quiet_wait_s", type=float, default=60.0)
    parser.add_argument("--stop_timeout_s", type=float, default=3600.0)
    args = parser.parse_args()
    if not 0 < args.kill_at < 1 or args.rounds < 1:
        parser.error(f"--kill_at must be in (0, 1) and --rounds >= 1, got "
                     f"{args.kill_at} and {args.rounds}.")
    flags = [f"--image_size={args.image_size}",
             f"--num_shards={args.num_shards}" if args.num_shards
             else f"--target_shard_mb={args.target_shard_mb:g}"]

    os.makedirs(args.work_dir, exist_ok=True)
    tree = ensure_tree(args.work_dir, args.num_images, "web", verbose=True)
    tiny_tree = ensure_tree(args.work_dir, args.tiny_images, "web")
    out_root = os.path.join(args.work_dir, "resume_out")
    os.makedirs(out_root, exist_ok=True)
    rounds = []
    for r in range(args.rounds):
        rounds.append(one_round(args, tree, tiny_tree, out_root, flags))
        print(f"round {r + 1}/{args.rounds}: {json.dumps(rounds[-1]['wall_s'])}",
              flush=True)
    summary = summarize(rounds, args.goal)
    harness.write_result(args.out, args.setting or f"web_{args.num_images}", chart=CHART,
                         result={
        "date": datetime.date.today().isoformat(), "machine": harness.machine(),
        "code": harness.code_version(), "input": describe(tree), "tiny_input": tiny_tree,
        "flags": {"job": flags, "kill_at": args.kill_at, "rounds": args.rounds,
                  "max_foreign": args.max_foreign, "quiet_wait_s": args.quiet_wait_s},
        "rounds": rounds, "summary": summary})

    first, walls = rounds[0], summary["wall_s"]
    print(f"{first['inputs']} photos, {first['shards']} shards {first['shards_per_split']}, "
          f"killed after {first['pause_at']} ({first['killed_shard_records']} records).")
    print(f"resumed run transformed {summary['fraction_transformed']['worst']:.3f} of the "
          f"inputs (worst round; goal <= {args.goal}): {summary['verdict']}")
    for name in ("full", "killed_until_kill", "resumed", "tiny"):
        print(f"  {name:18s} median {walls[name]['median']:7.1f} s   "
              f"best {walls[name]['best']:7.1f} s")
    print(f"  resumed / full: {summary['resumed_over_full_median']:.3f} (median), "
          f"{summary['resumed_over_full_best']:.3f} (best); start-up cost paid by both: "
          f"~{walls['tiny']['median']:.1f} s ({args.tiny_images} photos); start-up + the "
          f"transformed share of the rest: {summary['resumed_predicted_s_median']:.1f} s")
    print(f"  byte-identical to the full run: "
          f"{'yes' if summary['byte_identical'] else 'NO'}; results: {args.out}")


CHART = harness.Chart("wall time by run", lambda result: result["summary"]["wall_s"],
                      unit="s")


if __name__ == "__main__":
    main()
