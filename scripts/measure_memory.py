"""Peak memory of the image job at 1x and 10x input: is it flat in data size?

Writes N and 10N small real-photo crops (random windows of scikit-learn's two sample
photos, 48-96 px, as JPEG) and runs the image job on each as a subprocess, sampling
the resident set size of the job and all its child processes every 50 ms. Each input
size runs twice: with the default shard size (one shard per split here, so the
shard being written grows with the input up to --target_shard_mb) and with
--target_shard_mb=--small_shard_mb (every shard, and so every GroupByKey group our
code gathers, stays small), which separates the growth our sharding allows from the
growth of the runner itself.

Inside the job process, the local runner's stage buffers are measured too: after
every stage, the bytes held by every live ``ListBuffer`` / ``GroupingBuffer`` of
Beam's FnApiRunner (encoded PCollection data kept between stages) are summed, and the
peak is reported. Prints a table and writes JSON.

A third configuration runs the same job on the PortableRunner with its SDK worker in a
subprocess: the runner, with its buffers, stays in the job process ("launcher"), while
every DoFn of ours runs in the worker, so the worker's peak shows what our code holds.

Controls ("beam_control", "beam_control_portable"): a Beam pipeline with no
TensorFlow and none of our code that moves the same bytes across as many stage
boundaries as the job does (one record per input image, of the input's mean file
size, through a GroupByKey; then one of the job's mean output example size through
two more), run the same way at every input size, in-process and with a portable SDK
worker. What it gains with the data is what the local runner costs any pipeline.

--extra_factors adds larger inputs (e.g. 30 for 60,000 images), to see where growth
levels off; the ratios compare 1x with 10x.

Usage: python scripts/measure_memory.py [--base 2000] [--factor 10] [--extra_factors 30]
       [--out docs/benchmarks/memory.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
import psutil

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from pipelines.runner_defaults import DEFAULT_RUNNER  # noqa: E402

# Runs the image job with the FnApiRunner's stage buffers accounted for, and prints
# one JSON line with the job's wall time and the peak bytes those buffers held.
_DRIVER = r"""
import json, re, resource, sys, time, weakref
from apache_beam.runners.portability.fn_api_runner import execution, fn_runner

live = weakref.WeakSet()
for cls in (execution.ListBuffer, execution.GroupingBuffer):
    def patched_init(self, *args, _orig=cls.__init__, **kwargs):
        _orig(self, *args, **kwargs)
        live.add(self)
    cls.__init__ = patched_init

def approx(obj):
    if isinstance(obj, (bytes, bytearray, str)):
        return len(obj)
    if isinstance(obj, (tuple, list)):
        return sum(approx(x) for x in obj)
    if hasattr(obj, "value") and hasattr(obj, "windows"):  # WindowedValue
        return approx(obj.value)
    return 8

def buffered_bytes():
    total = 0
    for buf in list(live):
        if getattr(buf, "cleared", False) is True:
            continue
        total += sum(len(x) for x in getattr(buf, "_inputs", ()))
        for part in getattr(buf, "_grouped_output", None) or ():
            total += sum(len(x) for x in part)
        for values in getattr(buf, "_table", {}).values():
            total += approx(values)
    return total

def short(stage_name):
    # "((a)+(ref_AppliedPTransform_Preprocess-Transform-train-Transform_224))+..." ->
    # the transform names it fuses, shortened.
    names = re.findall(r"ref_AppliedPTransform_([A-Za-z0-9_.\[\]-]+?)_\d+\)", stage_name)
    names += re.findall(r"\(([A-Za-z0-9_.\[\]/-]+)/(?:Read|Write)\)", stage_name)
    return ", ".join(dict.fromkeys(n.replace("-", "/") for n in names))[:120] or stage_name[:120]

peak = {"bytes": 0, "stage": ""}
stages = []
orig_execute = fn_runner.FnApiRunner._execute_bundle
def execute(self, ctx, bundle_context_manager, *args, **kwargs):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = orig_execute(self, ctx, bundle_context_manager, *args, **kwargs)
    held = buffered_bytes()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    name = short(bundle_context_manager.stage.name)
    stages.append({"stage": name, "maxrss_rise_mib": round((after - before) / 1024, 1),
                   "buffered_mib_after": round(held / 2**20, 1)})
    if held > peak["bytes"]:
        peak.update(bytes=held, stage=name)
    return result
fn_runner.FnApiRunner._execute_bundle = execute

from pipelines import images
start = time.perf_counter()
images.run(json.loads(sys.argv[1]))
print("MEMORY_RESULT " + json.dumps({"job_s": time.perf_counter() - start,
                                     "peak_buffered_bytes": peak["bytes"],
                                     "peak_buffered_after_stage": peak["stage"],
                                     "stages": stages}))
"""

# The control: the same number of records and bytes as the image job's input, through
# a trivial Beam pipeline on the same runner flags. Prints one JSON line.
_CONTROL_DRIVER = r"""
import hashlib, json, sys, time
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
args = json.loads(sys.argv[1])
records = args["records"]

def payload(i, size):
    return (hashlib.sha256(str(i).encode()).digest() * (size // 32 + 1))[:size]

def generate(_):
    for i in range(records):
        yield i % 64, (i, payload(i, args["input_bytes_per_record"]))

def to_output(group):
    key, values = group
    for i, _ in values:
        yield key, (i, payload(-i, args["output_bytes_per_record"]))

def ungroup(group):
    key, values = group
    for value in values:
        yield key, value

start = time.perf_counter()
with beam.Pipeline(options=PipelineOptions(args["flags"])) as p:
    _ = (p | beam.Impulse() | "Generate" >> beam.FlatMap(generate)
         | "Boundary1" >> beam.GroupByKey() | "ToOutput" >> beam.FlatMap(to_output)
         | "Boundary2" >> beam.GroupByKey() | "Ungroup" >> beam.FlatMap(ungroup)
         | "Boundary3" >> beam.GroupByKey()
         | "Sizes" >> beam.Map(lambda kv: sum(len(v) for _, v in kv[1]))
         | beam.combiners.Count.Globally())
print("MEMORY_RESULT " + json.dumps({"job_s": time.perf_counter() - start,
                                     "peak_buffered_bytes": 0,
                                     "peak_buffered_after_stage": "", "stages": []}))
"""

PORTABLE_WORKER_FLAGS = [
    "--runner=PortableRunner", "--job_endpoint=embed",
    "--environment_type=beam:env:harness_subprocess_python:v1",
    f"--environment_config={sys.executable} -m apache_beam.runners.worker.sdk_worker_main"]


def write_crops(root: str, count: int, seed: int = 0) -> None:
    """``count`` JPEG crops, 48-96 px, in 10 class folders."""
    import tensorflow as tf
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    rng = np.random.default_rng(seed)
    for i in range(count):
        photo = photos[i % len(photos)]
        h, w = (int(x) for x in rng.integers(48, 97, 2))
        top = int(rng.integers(0, photo.shape[0] - h))
        left = int(rng.integers(0, photo.shape[1] - w))
        folder = os.path.join(root, f"class{i % 10}")
        os.makedirs(folder, exist_ok=True)
        tf.io.write_file(os.path.join(folder, f"{i:06d}.jpg"), tf.io.encode_jpeg(
            np.ascontiguousarray(photo[top:top + h, left:left + w]), quality=90))


def run_sampled(argv: list[str] | dict, driver: str = _DRIVER) -> dict:
    """Runs ``driver`` (the job, or the control) with ``argv``; returns peak tree RSS,
    wall time and the driver's result."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": os.pathsep.join([REPO_ROOT, os.environ.get("PYTHONPATH", "")])}
    start = time.monotonic()
    process = psutil.Popen([sys.executable, "-c", driver, json.dumps(argv)], env=env,
                           cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = peak_single = peak_launcher = peak_workers = 0
    while process.poll() is None:
        try:
            launcher = process.memory_info().rss
            children = [p.memory_info().rss for p in process.children(recursive=True)]
        except psutil.NoSuchProcess:  # A process ended between listing and reading.
            time.sleep(0.05)
            continue
        workers = sum(children)
        peak_single = max([peak_single, launcher, *children])
        peak = max(peak, launcher + workers)
        peak_launcher = max(peak_launcher, launcher)
        peak_workers = max(peak_workers, workers)
        time.sleep(0.05)
    stdout, stderr = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"job failed: {stderr.decode()[-3000:]}")
    line = next(x for x in stdout.decode().splitlines() if x.startswith("MEMORY_RESULT "))
    return {"peak_rss_bytes": peak, "peak_single_process_rss_bytes": peak_single,
            "peak_launcher_rss_bytes": peak_launcher, "peak_workers_rss_bytes": peak_workers,
            "process_wall_s": time.monotonic() - start,
            **json.loads(line.split(" ", 1)[1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=int, default=2000, help="Images at 1x.")
    parser.add_argument("--factor", type=int, default=10)
    parser.add_argument("--extra_factors", default="",
                        help="Comma-separated further multiples of --base to run.")
    parser.add_argument("--image_size", type=int, default=64)
    parser.add_argument("--small_shard_mb", type=float, default=1.0,
                        help="--target_shard_mb of the bounded-shard runs.")
    parser.add_argument("--work_dir", default=None,
                        help="Keep inputs here (default: a temporary directory).")
    parser.add_argument("--out", default="docs/benchmarks/memory.json")
    args = parser.parse_args()

    mib = 2**20
    configs = {"default_shards": [],
               "small_shards": [f"--target_shard_mb={args.small_shard_mb}"],
               # Our code in an SDK worker process, the runner (and its buffers) in
               # the launcher: separates the two.
               "portable_worker": [f"--target_shard_mb={args.small_shard_mb}",
                                   *PORTABLE_WORKER_FLAGS]}
    controls = {"beam_control": [f"--runner={DEFAULT_RUNNER}"],
                "beam_control_portable": PORTABLE_WORKER_FLAGS}
    runs = []

    def record(count: int, config: str, flags: list[str], result: dict,
               manifest: dict | None) -> None:
        splits = manifest["splits"].values() if manifest else []
        runs.append({
            "images": count, "config": config, "flags": flags,
            "shards": sum(len(s["shards"]) for s in splits) if manifest else None,
            "output_mib": round(sum(s["num_bytes"] for s in splits) / mib, 1)
            if manifest else None,
            "peak_rss_mib": round(result["peak_rss_bytes"] / mib, 1),
            "peak_single_process_rss_mib": round(
                result["peak_single_process_rss_bytes"] / mib, 1),
            "peak_launcher_rss_mib": round(result["peak_launcher_rss_bytes"] / mib, 1),
            "peak_workers_rss_mib": round(result["peak_workers_rss_bytes"] / mib, 1),
            "peak_runner_buffers_mib": round(result["peak_buffered_bytes"] / mib, 1),
            "peak_runner_buffers_after_stage": result["peak_buffered_after_stage"],
            "largest_maxrss_rises": sorted(
                result["stages"], key=lambda st: -st["maxrss_rise_mib"])[:4],
            "job_s": round(result["job_s"], 1),
            "process_wall_s": round(result["process_wall_s"], 1),
        })
        r = runs[-1]
        print(f"{count:>7} images, {config:<21} peak RSS {r['peak_rss_mib']:8.1f} MiB "
              f"(launcher {r['peak_launcher_rss_mib']:.1f}, workers "
              f"{r['peak_workers_rss_mib']:.1f}), runner buffers "
              f"{r['peak_runner_buffers_mib']:7.1f} MiB, job {r['job_s']:6.1f} s", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        work = args.work_dir or tmp
        factors = [1, args.factor, *(int(f) for f in filter(None, args.extra_factors.split(",")))]
        for count in (args.base * f for f in factors):
            root = os.path.join(work, f"in{count}")
            if not os.path.isdir(root):
                write_crops(root, count)
            for config, flags in configs.items():
                out = os.path.join(work, f"out{count}_{config}")
                result = run_sampled([f"--input={root}", f"--output_dir={out}",
                                      f"--image_size={args.image_size}", "--overwrite",
                                      *flags])
                with open(os.path.join(out, "manifest.json")) as f:
                    record(count, config, flags, result, json.load(f))
            input_bytes = sum(os.path.getsize(os.path.join(d, name))
                              for d, _, names in os.walk(root) for name in names)
            job_run = next(r for r in runs if r["images"] == count
                           and r["config"] == "default_shards")
            for config, flags in controls.items():
                result = run_sampled({
                    "records": count, "flags": flags,
                    "input_bytes_per_record": round(input_bytes / count),
                    "output_bytes_per_record": round(job_run["output_mib"] * mib / count)},
                    driver=_CONTROL_DRIVER)
                record(count, config, flags, result, None)
    growth = {}
    for config in [*configs, *controls]:
        small, large = (r for r in runs if r["config"] == config
                        and r["images"] in (args.base, args.base * args.factor))
        growth[config] = {
            "peak_rss_ratio": round(large["peak_rss_mib"] / small["peak_rss_mib"], 3),
            "peak_rss_growth_mib": round(large["peak_rss_mib"] - small["peak_rss_mib"], 1),
            "peak_launcher_rss_ratio": round(
                large["peak_launcher_rss_mib"] / small["peak_launcher_rss_mib"], 3),
            "peak_workers_rss_ratio": round(
                large["peak_workers_rss_mib"] / small["peak_workers_rss_mib"], 3)
            if small["peak_workers_rss_mib"] else None,
            "runner_buffers_growth_mib": round(
                large["peak_runner_buffers_mib"] - small["peak_runner_buffers_mib"], 1),
            "peak_rss_growth_kib_per_extra_image": round(
                (large["peak_rss_mib"] - small["peak_rss_mib"]) * 1024
                / (large["images"] - small["images"]), 1),
        }
        print(f"{config}: {args.factor}x input -> {growth[config]['peak_rss_ratio']:.2f}x "
              f"peak RSS (+{growth[config]['peak_rss_growth_mib']} MiB; runner buffers "
              f"+{growth[config]['runner_buffers_growth_mib']} MiB)")
    report = {"date": time.strftime("%Y-%m-%d"), "cpu_cores": os.cpu_count(),
              "machine": platform.processor() or platform.machine(),
              "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
              "image_size": args.image_size,
              "input": "random 48-96 px crops of sklearn's sample photos, JPEG q90",
              "runner": "default (FnApiRunner, in_memory); portable_worker: "
                        "PortableRunner, embedded job service, SDK worker subprocess",
              "runs": runs,
              "growth": growth,
              "definitions": {
                  "peak_rss": "max over 50 ms samples of the summed RSS of the job "
                              "process and its children",
                  "launcher / workers": "the job process alone / its child processes "
                                        "(SDK workers) summed, peaks over the samples",
                  "runner_buffers": "bytes held by the FnApiRunner's live ListBuffer / "
                                    "GroupingBuffer objects, measured after each stage",
                  "beam_control": "no TensorFlow, none of our code: one record per "
                                  "input image of the input's mean file size -> "
                                  "GroupByKey (64 keys) -> one record of the job's mean "
                                  "output size each -> GroupByKey -> GroupByKey -> "
                                  "count; default runner (beam_control) or portable "
                                  "SDK worker subprocess (beam_control_portable)"}}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2, sort_keys=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
