"""Where each job's CPU time goes, phase by phase, per row or per photo.

Runs a job at its default flags under py-spy (``record --threads``: every working
thread's Python frames, idle ones left out; the native work a Python call runs,
TensorFlow's kernels, pyarrow's parser, ISA-L's deflate, is sampled in that call) and
sorts each sample into the first phase whose pattern matches a frame of its stack
(``SERIES_PHASES``, ``IMAGE_PHASES``: read, parse/decode, transform ops, facts and
hashes, Example encoding, framing, deflate, the runner's own work per bundle and
stage boundary, ...). py-spy pauses the job for each sample, which stretches its wall
time, so a phase's CPU time is its share of the samples times the job's CPU time
measured in the same round without the profiler (``harness.timed_job_command``:
after the imports, its process and any worker it waited for); each round profiles
once and times once, and the table holds the median share and the median CPU time.

  --job timeseries  the series_job benchmark's CSV (--series x --hours, generated
                    once into --work_dir) and flags (window 168, shift 24, horizon 24,
                    --missing=interpolate): CPU microseconds per input row;
  --job images      --num_images web-size photos (sample_photos.py) at 224 px JPEG:
                    CPU milliseconds per photo.

With --code_dir DIR (another checkout, e.g. ``git worktree add /tmp/before <commit>``)
the job is DIR's code, for the table before a change; --label names it in the JSON.

Usage:

    python -m scripts.benchmarks phases --job timeseries --rounds 3
    python -m scripts.benchmarks phases --job images --num_images 2000 --rounds 3 \\
        --code_dir /tmp/before --label before
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

from scripts.benchmarks import harness, sample_photos, series_job

BENCHMARK = harness.Benchmark(
    name="phases",
    measures="each job's CPU time by phase (py-spy samples), per row or photo",
    quick=("--job", "timeseries", "--work_dir", "{quick_dir}/phases", "--series", "10",
           "--hours", "2000", "--rounds", "1", "--out",
           "{quick_dir}/phases.json"),
)

# (phase, pattern): a sample is the first phase with a pattern found in one of its
# frames (py-spy writes a frame as "function (file:line)", or the library for a
# native one). Order matters: the specific before the general.
COMMON_HEAD = [
    ("imports", r"_find_and_load|_call_with_frames_removed"),
    ("deflate", r"isal|igzip|\(gzip\.py:|deflate|zlib|compress_block|longest_match"),
    ("file hash (sha256)", r"_HashingWriter|sha256"),
    ("framing (TFRecord length + CRC32C)",
     r"crc32c|_TFRecordUtil|ShardWriter\.write|FrameChunks|^frames \(reader"),
]
_OUR_STATISTICS = (r"\((etl|reader)/[^)]*(stats|statistics|drift|report|quality|"
                   r"facts)[^)]*\.py")
COMMON_TAIL = [
    ("statistics and report", _OUR_STATISTICS),
    ("tf.Transform analysis", r"tensorflow_transform|analysis\.py|zscore\.py"),
    ("building the pipeline", r"build_pipeline|\.expand \(|pipeline\.py"),
    ("publish (manifest, renames, rejections)",
     r"\(etl/core/publishing/|versions\.py|shards/removal\.py|output_dir\.py"),
    ("Beam runner: bundles, coders, stage boundaries",
     r"apache_beam/(runners|coders|transforms|utils|io)|grpc|_pb2|protobuf"),
    ("TensorFlow runtime", r"tensorflow"),
]
SERIES_PHASES = [
    *COMMON_HEAD,
    ("statistics and report", r"\(etl/timeseries/row_statistics\.py|" + _OUR_STATISTICS),
    ("shard: read runs back, order windows",
     r"_ShardWindows\.__init__|\(etl/core/shards/placement\.py"),
    ("shard: cut windows", r"_ShardWindows\.cut|window_steps"),
    ("Example encoding (tfx_bsl + deterministic re-serialize)",
     r"\(etl/timeseries/window_examples\.py|example_coder"),
    ("transform_fn (TensorFlow)", r"SeriesTransform|PrunedTransform"),
    ("shard step, other", r"\(etl/timeseries/shards\.py|\(etl/core/shards/step\.py"),
    ("clean, split, window runs (per bucket of series)",
     r"\(etl/timeseries/(buckets|series|runs|per_series|covariates|calendar|categories)\.py"),
    ("read and parse the CSV (pyarrow), spill by bucket",
     r"\(etl/timeseries/rows/"),
    *COMMON_TAIL,
]
IMAGE_PHASES = [
    *COMMON_HEAD,
    ("facts and hashes", r"\(etl/images/(facts|duplicates/signatures|quality|stats)\.py|xxh"),
    ("read files, header checks",
     r"ReadImages|\(etl/images/(sources|exif|label_entries)\.py|\(etl/core/io/local_tree\.py"),
    ("decode (strict JPEG check, scaled)",
     r"simplejpeg|\(etl/images/loading\.py|DecodeJpeg|decode_jpeg"),
    ("Example encoding", r"\(etl/core/transform/examples\.py|SerializeToString"),
    ("transform ops (resize, crop, encode)",
     r"ImageTransform|FinishImages|\(etl/images/(preprocessing|codec|batches)\.py"),
    ("shard step, other", r"\(etl/images/shards\.py|\(etl/core/shards/step\.py"),
    *COMMON_TAIL,
]

# py-spy counts threads waiting in C (a queue's get) as working: a sample whose
# innermost frame is Python's waiting machinery (threads, queues, selectors) or the
# loop of a thread that only waits for calls (``etl.core.io.timed_calls``) is idle.
_WAITING = re.compile(r"\((threading|queue|selectors|concurrent/futures/thread)\.py:\d+\)$|"
                      r"^_Helper\.run \(etl/core/io/timed_calls\.py:\d+\)$")

UNITS = {"timeseries": ("row", 1e6, "us"), "images": ("photo", 1e3, "ms")}


def classify(raw_path: str, phases: list[tuple[str, str]]) -> collections.Counter:
    """Samples per phase of a py-spy ``--format raw`` file (one ``stack count`` a
    line, the thread first, frames from the outermost)."""
    patterns = [(name, re.compile(pattern)) for name, pattern in phases]
    counts: collections.Counter = collections.Counter()
    with open(raw_path) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            frames = stack.split(";")[1:]
            if not frames or _WAITING.search(frames[-1]):
                continue
            counts[next((name for name, pattern in patterns
                         if any(pattern.search(frame) for frame in frames)), "other")] += int(n)
    return counts


def job_argv(args: argparse.Namespace, out: str) -> tuple[str, list[str], int]:
    """The job's module, its flags and its input's size (rows or photos)."""
    if args.job == "timeseries":
        path = series_job.ensure_input(args.work_dir, args.series, args.hours)
        return ("pipelines.timeseries",
                [f"--input={path}", f"--output_dir={out}", "--overwrite",
                 "--window_size=168", "--shift=24", "--horizon=24",
                 "--missing=interpolate"], args.series * args.hours)
    root = sample_photos.ensure_photos(args.work_dir, args.num_images)
    return ("pipelines.images", [f"--input={root}", f"--output_dir={out}", "--overwrite",
                                 "--image_size=224"], args.num_images)


def profile(module: str, argv: list[str], raw_path: str, rate: int, code_dir: str,
            log: str, native: bool = False) -> float:
    """py-spy's samples of one run into ``raw_path``; the run's wall seconds."""
    py_spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    command = [py_spy, "record", *(["--native"] if native else []), "--threads", "--rate",
               str(rate), "--format", "raw", "--output", raw_path, "--", sys.executable,
               "-m", module, *argv]
    started = time.perf_counter()
    with open(log, "wb") as f:
        done = subprocess.run(command, cwd=code_dir, env=harness.job_env(code_dir),
                              stdout=f, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        with open(log, errors="replace") as f:
            raise RuntimeError(f"py-spy or the job failed:\n{f.read()[-3000:]}")
    return time.perf_counter() - started


def timed(module: str, argv: list[str], out: str, code_dir: str, log: str) -> dict:
    """One run without the profiler: its job seconds and CPU seconds (no imports)."""
    timings = out + ".timings.json"
    result = harness.measure(harness.timed_job_command(module, argv, timings), log, code_dir)
    if result["rc"] != 0:
        raise RuntimeError(f"the job failed (rc {result['rc']}); see {log}")
    return {**harness.read_json(timings), "peak_rss_mib": result["peak_rss_mib"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", choices=sorted(UNITS), default="timeseries")
    parser.add_argument("--series", type=int, default=370)
    parser.add_argument("--hours", type=int, default=8760)
    parser.add_argument("--num_images", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=100,
                        help="Samples per second and thread.")
    parser.add_argument("--native", action="store_true",
                        help="py-spy --native: native frames too. Measured on the "
                             "time-series job it slowed the job 5x, counted threads "
                             "waiting in C as working and gave tf.Transform's analysis "
                             "38 %% of the samples (7 %% without), so it is off by "
                             "default.")
    parser.add_argument("--code_dir", default=harness.REPO_ROOT,
                        help="The checkout whose jobs run (default: this one).")
    parser.add_argument("--label", default="", help="What --code_dir is, for the JSON.")
    parser.add_argument("--work_dir", default="/tmp/bench_phases")
    harness.add_result_flags(parser, "phases", "<job>_<size>[_<label>]")
    args = parser.parse_args()
    args.work_dir = os.path.abspath(args.work_dir)
    code_dir = os.path.abspath(args.code_dir)
    os.makedirs(os.path.join(args.work_dir, "logs"), exist_ok=True)
    out = os.path.join(args.work_dir, "out")
    module, argv, size = job_argv(args, out)
    phases = SERIES_PHASES if args.job == "timeseries" else IMAGE_PHASES
    unit, scale, unit_name = UNITS[args.job]
    shares: dict[str, list[float]] = collections.defaultdict(list)
    runs = []
    for r in range(args.rounds):
        raw = os.path.join(args.work_dir, f"samples_{r}.txt")
        log = os.path.join(args.work_dir, "logs", f"profiled_{r}.log")
        profiled_s = profile(module, argv, raw, args.rate, code_dir, log, args.native)
        counts = classify(raw, phases)
        job_samples = sum(n for name, n in counts.items() if name != "imports")
        for name, _ in [*phases, ("other", "")]:
            if name != "imports":
                shares[name].append(counts.get(name, 0) / job_samples)
        run = timed(module, argv, out, code_dir,
                    os.path.join(args.work_dir, "logs", f"timed_{r}.log"))
        runs.append({"profiled_s": round(profiled_s, 2), "samples": job_samples, **run})
        print(f"round {r + 1}/{args.rounds}: job {run['job_s']:.2f} s, CPU "
              f"{run['job_cpu_s']:.2f} s; profiled run {profiled_s:.1f} s, "
              f"{job_samples} samples", flush=True)
    shutil.rmtree(out, ignore_errors=True)
    cpu_s = statistics.median(run["job_cpu_s"] for run in runs)
    table = {}
    for name, values in shares.items():
        share = statistics.median(values)
        if share:
            table[name] = {"share": round(share, 4),
                           f"cpu_{unit_name}_per_{unit}": round(share * cpu_s / size * scale,
                                                                 3)}
    print(f"\n{args.job}, {size:,} {unit}s, code {code_dir} {args.label}: job "
          f"{statistics.median(run['job_s'] for run in runs):.2f} s, CPU {cpu_s:.2f} s "
          f"({cpu_s / size * scale:.3f} {unit_name} per {unit}); medians of "
          f"{args.rounds} round(s)")
    print(f"| phase | share of CPU | CPU {unit_name} per {unit} |\n|---|---:|---:|")
    for name, entry in sorted(table.items(), key=lambda item: -item[1]["share"]):
        print(f"| {name} | {entry['share'] * 100:.1f} % | "
              f"{entry[f'cpu_{unit_name}_per_{unit}']:.3f} |")
    commit = subprocess.run(["git", "-C", code_dir, "rev-parse", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    result = {"date": time.strftime("%Y-%m-%d"), "machine": harness.machine(),
              "code": {"dir": code_dir, "commit": commit, "label": args.label},
              "job": args.job, "size": size, "unit": unit, "rate": args.rate,
              "runs": runs, "job_cpu_s_median": cpu_s,
              "job_s_median": statistics.median(run["job_s"] for run in runs),
              "phases": table}
    setting = args.setting or "_".join(filter(None, [args.job, str(size), args.label]))
    harness.write_result(args.out, setting, result, CHART)
    print(f"wrote {args.out}")


CHART = harness.Chart("share of the job's CPU time by phase", lambda result: {
    name: round(entry["share"] * 100, 1) for name, entry in sorted(
        result["phases"].items(), key=lambda item: -item[1]["share"])},
    unit="% of CPU", value_format=".1f")


if __name__ == "__main__":
    main()
