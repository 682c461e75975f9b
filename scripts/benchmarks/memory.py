"""Peak memory of the image job on photo-sized JPEGs: is it flat in the input size?

For each --sizes N photos from scripts/benchmarks/sample_photos.py of the --photos kind (web,
the default: 2,000, 20,000 and 200,000 photos of 320-1280 px, about 65 KB each, so
~13 GB at 200,000; camera12 / camera24: 60 and 240 camera-size photos of 12 / 24
megapixels, about 2.3 / 4.5 MB each), runs the job exactly as a user does,
``python -m pipelines.images --input=<tree> --output_dir=... --overwrite
[--job_flags]``, and reads its peak resident set size
from the kernel: the job is the only child of a fresh wrapper interpreter, which,
once the job has exited, prints ``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``.
That is the kernel's own high-water mark, exact (nothing sampled, so no spike
is missed) and this job's alone (the wrapper is new for every measurement).

ru_maxrss of RUSAGE_CHILDREN is the *largest* peak among the waited-for descendants,
not their sum. With the default runner the job is one process, so the figure is the
job's peak. For multi-process configurations (--configs multi_processing: SDK worker
subprocesses) it is the largest single process, reported as such; the wrapper is
made a child subreaper on Linux, so workers that outlive the job are re-parented to
it and reaped, and count too (``stragglers`` in the JSON says how many there were).

Also measured, each in its own fresh wrapper:
  imports_only  ``python -c "import pipelines.images"``: the interpreter, Beam and
                TensorFlow before any data, the floor under every job figure;
  beam_control  a Beam pipeline on the default runner with no TensorFlow and none of
                our code that moves N small records (--control_record_bytes each, the
                size of what should cross the job's stage boundaries: keys, plans,
                counts) across three GroupByKeys; what it gains from one size to the
                next is what the local runner itself costs per record.

Targets, printed PASS/FAIL and saved: the second size's job peak at most --max_growth
(1.25) times the first's (20,000 vs 2,000 with the default sizes), and every job
peak at most --max_peak_gb (2.5 GB = 2.5e9 bytes).

Generated photos are kept in --work_dir (``photos_<N>``, ``camera24_<N>``, ...;
smaller trees hard-link the files of a larger one of their kind) and reused by later
runs; job outputs go to ``<work_dir>/memory_out`` and are deleted after their
manifest is read.

Usage (the full measurement; the 200,000-photo tree takes a while to generate the
first time: see scripts/benchmarks/sample_photos.py):

    nice -n 19 python -m scripts.benchmarks memory --work_dir /work/bench_data \\
        --sizes 2000,20000,200000
    nice -n 19 python -m scripts.benchmarks memory --work_dir /work/bench_data \\
        --photos camera24 --sizes 60
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
import time

from scripts.benchmarks import harness
from scripts.benchmarks.sample_photos import KINDS, describe, ensure_tree

BENCHMARK = harness.Benchmark(
    name="memory",
    measures="the image job's peak memory as the input grows",
    quick=("--work_dir", "{quick_dir}/photos", "--sizes", "20,40", "--out",
           "{quick_dir}/memory.json"),
)


# N records of a fixed size across three GroupByKeys, no TensorFlow: the control.
_CONTROL = r"""
import json, sys
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
records, size = int(sys.argv[1]), int(sys.argv[2])

def generate(_):
    for i in range(records):
        yield i % 64, (str(i).encode() * size)[:size]

def ungroup(group):
    key, values = group
    for value in values:
        yield (key + 1) % 64, value

with beam.Pipeline(options=PipelineOptions([])) as p:
    _ = (p | beam.Impulse() | "Generate" >> beam.FlatMap(generate)
         | "Boundary1" >> beam.GroupByKey() | "Ungroup1" >> beam.FlatMap(ungroup)
         | "Boundary2" >> beam.GroupByKey() | "Ungroup2" >> beam.FlatMap(ungroup)
         | "Boundary3" >> beam.GroupByKey()
         | "Sizes" >> beam.Map(lambda kv: sum(len(v) for v in kv[1]))
         | beam.combiners.Count.Globally())
"""

CONFIGS: dict[str, list[str]] = {
    "default": [],
    "multi_processing": ["--direct_running_mode=multi_processing",
                         "--direct_num_workers=2"],
}
# --sizes when not given, by kind of photos.
DEFAULT_SIZES = {"web": "2000,20000,200000", "camera": "60,240"}


def _log_tail(path: str, lines: int = 15) -> str:
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


def targets(runs: list[dict], sizes: list[int], max_growth: float,
            max_peak_gb: float) -> dict:
    """PASS/FAIL of the memory targets over the default-config job runs."""
    jobs = {r["images"]: r for r in runs if r["config"] == "default"}
    result: dict = {"max_peak_bytes": max_peak_gb * 1e9, "max_growth": max_growth}
    if len(sizes) >= 2 and sizes[0] in jobs and sizes[1] in jobs:
        small, large = jobs[sizes[0]], jobs[sizes[1]]
        ok = small["rc"] == 0 and large["rc"] == 0
        ratio = large["peak_rss_mib"] / small["peak_rss_mib"]
        result["growth"] = {"sizes": [sizes[0], sizes[1]], "ratio": round(ratio, 3),
                            "pass": ok and ratio <= max_growth}
    result["peak"] = {
        str(n): {"peak_rss_mib": r["peak_rss_mib"],
                 "pass": r["rc"] == 0 and r["peak_rss_mib"] * harness.MIB <= max_peak_gb * 1e9}
        for n, r in jobs.items()}
    result["pass"] = (all(p["pass"] for p in result["peak"].values())
                      and result.get("growth", {}).get("pass", True))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", choices=KINDS, default="web",
                        help="The input's kind (scripts/benchmarks/sample_photos.py): web-size "
                             "(~65 KB) or camera-size, 12 or 24 megapixels.")
    parser.add_argument("--sizes", default=None,
                        help="Comma-separated input sizes (photos), smallest first. "
                             f"Default: {DEFAULT_SIZES['web']} web photos, "
                             f"{DEFAULT_SIZES['camera']} camera photos.")
    parser.add_argument("--configs", default="default",
                        help=f"Comma-separated job configurations: {', '.join(CONFIGS)}.")
    parser.add_argument("--job_flags", default="",
                        help="Extra flags for every job run, e.g. '--gzip_level=6'.")
    parser.add_argument("--no_control", action="store_true",
                        help="Skip imports_only and beam_control.")
    parser.add_argument("--control_record_bytes", type=int, default=256)
    parser.add_argument("--max_growth", type=float, default=1.25)
    parser.add_argument("--max_peak_gb", type=float, default=2.5)
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(),
                                                           "bench_photos"),
                        help="Generated photos are kept (and reused) here.")
    parser.add_argument("--keep_outputs", action="store_true")
    harness.add_result_flags(parser, "memory", "<photos>_<sizes joined by _>")
    args = parser.parse_args()

    kind = args.photos
    sizes = [int(s) for s in (args.sizes or DEFAULT_SIZES[
        "web" if kind == "web" else "camera"]).split(",")]
    configs = {name: CONFIGS[name] for name in args.configs.split(",")}
    job_flags = shlex.split(args.job_flags)
    out_root = os.path.join(args.work_dir, "memory_out")
    log_dir = os.path.join(args.work_dir, "memory_logs")
    os.makedirs(log_dir, exist_ok=True)
    runs: list[dict] = []
    inputs: dict[str, dict] = {}

    def report(run: dict) -> None:
        runs.append(run)
        status = "" if run["rc"] == 0 else f"  FAILED rc={run['rc']}, log {run['log']}"
        output = (f", {run['examples']} examples in {run['shards']} shards"
                  if "examples" in run else "")
        print(f"{run['images']:>7} images  {run['config']:<17} peak RSS "
              f"{run['peak_rss_mib']:8.1f} MiB  wall {run['wall_s']:7.1f} s  "
              f"CPU {run['cpu_s']:7.1f} s{output}{status}", flush=True)

    if not args.no_control:
        log = os.path.join(log_dir, "imports_only.log")
        report({"images": 0, "config": "imports_only", "log": log,
                **harness.measure([sys.executable, "-c", "import pipelines.images"], log)})
    for count in sizes:
        root = ensure_tree(args.work_dir, count, kind, verbose=True)
        inputs[str(count)] = describe(root)
        # Web runs are named <config>_<count>, other kinds <config>_<kind>_<count>.
        name = f"{count}" if kind == "web" else f"{kind}_{count}"
        for config, flags in configs.items():
            output_dir = os.path.join(out_root, f"{config}_{name}")
            log = os.path.join(log_dir, f"{config}_{name}.log")
            command = [sys.executable, "-m", "pipelines.images", f"--input={root}",
                       f"--output_dir={output_dir}", "--overwrite", *flags, *job_flags]
            print(f"{count:>7} images  {config:<17} running (log: {log})", flush=True)
            run = {"images": count, "config": config, "command": command[1:], "log": log,
                   **harness.measure(command, log)}
            if run["rc"] == 0:
                run.update(harness.output_summary(harness.read_manifest(output_dir)))
            else:
                print(_log_tail(log), file=sys.stderr)
            report(run)
            if not args.keep_outputs:
                shutil.rmtree(output_dir, ignore_errors=True)
        if not args.no_control:
            log = os.path.join(log_dir, f"beam_control_{name}.log")
            report({"images": count, "config": "beam_control", "log": log,
                    **harness.measure([sys.executable, "-c", _CONTROL, str(count),
                               str(args.control_record_bytes)], log)})

    verdict = targets(runs, sizes, args.max_growth, args.max_peak_gb)
    growth = verdict.get("growth")
    if growth:
        print(f"target: peak at {growth['sizes'][1]} <= {args.max_growth} x peak at "
              f"{growth['sizes'][0]}: {growth['ratio']:.3f} x -> "
              f"{'PASS' if growth['pass'] else 'FAIL'}")
    for count, peak in verdict["peak"].items():
        print(f"target: peak at {count} <= {args.max_peak_gb} GB "
              f"({args.max_peak_gb * 1e9 / harness.MIB:.0f} MiB): "
              f"{peak['peak_rss_mib']:.1f} MiB -> "
              f"{'PASS' if peak['pass'] else 'FAIL'}")
    for config in dict.fromkeys(r["config"] for r in runs if r["images"]):
        by_size = {r["images"]: r["peak_rss_mib"] for r in runs
                   if r["config"] == config and r["rc"] == 0}
        if sizes[0] in by_size:
            ratios = ", ".join(f"{n}: {by_size[n] / by_size[sizes[0]]:.2f}x"
                               for n in sizes[1:] if n in by_size)
            print(f"{config}: peak relative to {sizes[0]} images: {ratios or '-'}")

    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": harness.machine(),
        "code": harness.code_version(),
        "photos": kind,
        "inputs": inputs,
        "job_flags": job_flags,
        "runs": runs,
        "targets": verdict,
        "definitions": {
            "peak_rss_mib": "resource.getrusage(RUSAGE_CHILDREN).ru_maxrss of a fresh "
                            "wrapper process whose only child is the measured command, "
                            "read after it exits: the kernel's exact high-water mark of "
                            "the largest single process among the command and every "
                            "descendant (a max, not a sum; the wrapper is a child "
                            "subreaper, so orphaned descendants are reaped and count)",
            "wall_s / cpu_s": "the command's wall time (interpreter start included) and "
                              "the user + system CPU of it and its descendants",
            "imports_only": "python -c 'import pipelines.images': the floor",
            "beam_control": "no TensorFlow, none of our code: N records of "
                            f"{args.control_record_bytes} bytes -> GroupByKey (64 keys) "
                            "-> GroupByKey -> GroupByKey -> count, default runner",
        },
    }
    harness.write_result(args.out, args.setting or f"{args.photos}_{'_'.join(map(str, sizes))}",
                         result, CHART)
    print(f"{'all targets PASS' if verdict['pass'] else 'some target FAILED'}; "
          f"wrote {args.out}")


CHART = harness.Chart("peak RSS by run (one run each)", lambda result: {
    f"{run['config']}, {run['images']} images": run["peak_rss_mib"]
    for run in result["runs"] if "peak_rss_mib" in run},
    unit="MiB (peak RSS)", value_format=",.0f")


if __name__ == "__main__":
    main()
