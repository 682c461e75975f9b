"""Object-store benchmark: both jobs on a local GCS server against the same jobs on disk.

Starts fake-gcs-server (``tests/gcs_server.py``: the bundled binary, hermetic
credentials, every request logged) and uploads the inputs once: --num_images
web-size photos (``scripts/benchmarks/sample_photos.py``; ``--photos camera12`` for 12 MP ones)
and a long-format CSV of --series x --hours rows (``scripts/benchmarks/series_job.py``).
Each round then times four ``python -m pipelines.<job>`` commands, interleaved:

  images_disk   local folder → local output dir
  images_gcs    gs:// prefix → gs:// output dir, --tft_temp_dir on local disk
  series_disk   local CSV → local output dir
  series_gcs    gs:// CSV → gs:// output dir, --tft_temp_dir on local disk

timing the job itself (``run(argv)``, interpreter start and imports excluded),
counting the requests the server answered during each ``*_gcs`` command, by kind
(``tests.gcs_server.request_kind``), and the CPU time the server itself spent
meanwhile (it shares the machine's cores with the job here; on GCS that work is
Google's). Every command passes --overwrite, so from the second round on a run also
deletes the previous run's output. It checks that each ``*_gcs`` output,
downloaded, holds shards byte-identical to its ``*_disk`` twin. Last, it reads every
photo once more through ``etl.core.io.storage.read_bytes`` alone, from disk and from the
server, on 4 threads as the shard step does: the CPU each read costs the job's
process and the server, apart from everything else the job does.

The server is on loopback: a request costs ~0.1-1 ms here against 10-50 ms on real
GCS, so the ratio measures the work the seam adds per request (client, HTTP,
JSON), and the request counts are what carries over to a real bucket.

Usage:
    python -m scripts.benchmarks object_store --work_dir /tmp/bench_gcs [--rounds 3]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from typing import Any

from scripts.benchmarks import harness
from scripts.benchmarks.sample_photos import describe, ensure_tree
from scripts.benchmarks.series_job import ensure_input
from tests.gcs_server import GcsServer, download_tree, upload_tree

BENCHMARK = harness.Benchmark(
    name="object_store",
    measures="both jobs writing to a local GCS server against writing to disk",
    quick=("--work_dir", "{quick_dir}/gcs", "--num_images", "40", "--series", "10", "--hours",
           "500", "--rounds", "1", "--out", "{quick_dir}/object_store.json"),
)


BUCKET = "bench"
VARIANTS = ("images_disk", "images_gcs", "series_disk", "series_gcs")
SERIES_FLAGS = ("--window_size=168", "--shift=24", "--horizon=24", "--missing=interpolate")


def _upload_file(server: GcsServer, path: str, name: str) -> None:
    server.client().bucket(BUCKET).blob(name).upload_from_filename(path)


def _shard_digests(folder: str) -> dict[str, str]:
    digests = {}
    for split in ("train", "validation", "test"):
        split_dir = os.path.join(folder, split)
        for name in sorted(os.listdir(split_dir)) if os.path.isdir(split_dir) else []:
            with open(os.path.join(split_dir, name), "rb") as f:
                digests[f"{split}/{name}"] = hashlib.sha256(f.read()).hexdigest()
    return digests


def read_costs(server: GcsServer, photos: str) -> dict[str, Any]:
    """Every photo read once through ``storage.read_bytes``, from disk and from the
    server, on 4 threads: wall time, this process's CPU and the server's, per read."""
    import concurrent.futures
    import resource

    from etl.core.io import storage

    def own_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    relpaths = sorted(os.path.relpath(os.path.join(folder, name), photos)
                      for folder, _, names in os.walk(photos) for name in names
                      if name.endswith(".jpg"))
    costs = {}
    for where, base in (("disk", photos), ("gcs", f"gs://{BUCKET}/photos")):
        paths = [f"{base}/{relpath}" for relpath in relpaths]
        storage.read_bytes(paths[0])
        start, cpu, server_cpu = time.perf_counter(), own_cpu(), server.cpu_seconds()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            total = sum(map(len, pool.map(lambda p: storage.read_bytes(p, 64 << 20), paths)))
        costs[where] = {"reads": len(paths), "mb": round(total / 1e6, 1),
                        "wall_s": round(time.perf_counter() - start, 2),
                        "client_cpu_ms_per_read": round(
                            (own_cpu() - cpu) * 1000 / len(paths), 3),
                        "server_cpu_ms_per_read": round(
                            (server.cpu_seconds() - server_cpu) * 1000 / len(paths), 3)}
    return costs


def run_job(module: str, argv: list[str], env: dict[str, str], log: str) -> dict[str, Any]:
    """One job command in a fresh interpreter; its timings."""
    with tempfile.TemporaryDirectory() as tmp:
        timings = os.path.join(tmp, "timings.json")
        with open(log, "w") as out:
            proc = subprocess.run(harness.timed_job_command(module, argv, timings),
                                  cwd=harness.REPO_ROOT, env=env, stdout=out,
                                  stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            with open(log, errors="replace") as f:
                raise RuntimeError(f"{module} failed:\n{f.read()[-3000:]}")
        return harness.read_json(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default="/tmp/bench_gcs")
    parser.add_argument("--num_images", type=int, default=2000)
    parser.add_argument("--photos", default="web", choices=("web", "camera12", "camera24"))
    parser.add_argument("--series", type=int, default=370)
    parser.add_argument("--hours", type=int, default=2190)
    harness.add_result_flags(parser, "object_store", "images_<num_images>_series_<series>x<hours>")
    harness.add_sampling_flags(parser, rounds=3)
    parser.add_argument("--max_wait", type=float, default=120)
    args = parser.parse_args()

    os.makedirs(args.work_dir, exist_ok=True)
    photos = ensure_tree(args.work_dir, args.num_images, args.photos)
    series = ensure_input(args.work_dir, args.series, args.hours)
    server_root = os.path.join(args.work_dir, "gcs_server")
    shutil.rmtree(server_root, ignore_errors=True)
    with GcsServer(server_root) as server:
        config = tempfile.mkdtemp()
        env = {k: v for k, v in harness.job_env().items() if k != "GOOGLE_APPLICATION_CREDENTIALS"}
        env.update(server.hermetic_environment(config))
        os.environ.update(server.hermetic_environment(config))
        server.create_bucket(BUCKET)
        print("uploading the inputs ...", flush=True)
        upload_tree(server, photos, BUCKET, "photos")
        _upload_file(server, series, "series/rows.csv")
        out = os.path.join(args.work_dir, "out")
        logs = os.path.join(args.work_dir, "logs")
        os.makedirs(logs, exist_ok=True)
        commands = {
            "images_disk": ("pipelines.images", [f"--input={photos}",
                                                 f"--output_dir={out}/images"]),
            "images_gcs": ("pipelines.images", [f"--input=gs://{BUCKET}/photos",
                                                f"--output_dir=gs://{BUCKET}/images",
                                                f"--tft_temp_dir={out}/images_tft"]),
            "series_disk": ("pipelines.timeseries", [f"--input={series}",
                                                     f"--output_dir={out}/series",
                                                     *SERIES_FLAGS]),
            "series_gcs": ("pipelines.timeseries", [f"--input=gs://{BUCKET}/series/rows.csv",
                                                    f"--output_dir=gs://{BUCKET}/series",
                                                    f"--tft_temp_dir={out}/series_tft",
                                                    *SERIES_FLAGS]),
        }
        samples: dict[str, list[dict]] = {name: [] for name in VARIANTS}
        for r, name in harness.interleaved(VARIANTS, args.rounds):
            module, argv = commands[name]

            def one(name=name, module=module, argv=argv, r=r) -> dict:
                mark, server_cpu = server.log_size(), server.cpu_seconds()
                timings = run_job(module, [*argv, "--overwrite"], env,
                                  os.path.join(logs, f"{name}_{r}.log"))
                return {**timings, "requests": dict(server.requests(mark)),
                        "server_cpu_s": round(server.cpu_seconds() - server_cpu, 2)}

            measured, attempts = harness.quiet_sample(one, args.max_foreign, args.retries,
                                                      max_wait_s=args.max_wait)
            record = {**measured.extra, "foreign_cores": attempts[-1]}
            samples[name].append(record)
            print(f"round {r + 1}/{args.rounds} {name:<12} {record['job_s']:7.2f} s  "
                  f"requests {sum(record['requests'].values()):>6}  (other processes: "
                  f"{record['foreign_cores']:.2f} cores)", flush=True)
        reads = read_costs(server, photos)
        print(f"reads alone: {reads}", flush=True)
        same = {}
        for job in ("images", "series"):
            copy = os.path.join(args.work_dir, f"{job}_from_gcs")
            shutil.rmtree(copy, ignore_errors=True)
            download_tree(server, BUCKET, job, copy)
            same[job] = _shard_digests(copy) == _shard_digests(os.path.join(out, job))
            assert same[job], f"{job}: the gs:// shards differ from the local ones"
    images = harness.read_manifest(os.path.join(out, "images"))["inputs"]
    rows = harness.read_manifest(os.path.join(out, "series"))["inputs"]
    result = summarize(samples, images, rows)
    result.update({"date": time.strftime("%Y-%m-%d"), "machine": harness.machine(),
                   "code": harness.code_version(), "same_shards": same, "reads_alone": reads,
                   "input": {"photos": describe(photos), "series_rows": rows,
                             "series_bytes": os.path.getsize(series)},
                   "samples": samples})
    harness.write_result(args.out, args.setting or (
        f"images_{args.num_images}_series_{args.series}x{args.hours}"), result, CHART)
    for job, figures in result["jobs"].items():
        print(f"{job}: gcs / disk {figures['ratio_median']:.2f} x (best rounds "
              f"{figures['ratio_best']:.2f} x); server CPU {figures['server_cpu_s_median']} "
              f"s; requests per run {figures['requests_per_round'][-1]}")
    print(f"wrote {args.out}")


def summarize(samples: dict[str, list[dict]], images: int, rows: int) -> dict[str, Any]:
    """Medians, best rounds, the gcs ÷ disk ratios and requests per input (of the
    last round, which, like every round but the first, also deleted the previous
    output)."""
    jobs = {}
    for job, units in (("images", images), ("series", rows)):
        disk = [s["job_s"] for s in samples[f"{job}_disk"]]
        gcs = [s["job_s"] for s in samples[f"{job}_gcs"]]
        requests = samples[f"{job}_gcs"][-1]["requests"]
        jobs[job] = {
            "inputs": units,
            "disk_s": harness.spread(disk, higher_is_better=False),
            "gcs_s": harness.spread(gcs, higher_is_better=False),
            "server_cpu_s_median": statistics.median(
                s["server_cpu_s"] for s in samples[f"{job}_gcs"]),
            "ratio_median": round(statistics.median(gcs) / statistics.median(disk), 3),
            "ratio_best": round(min(gcs) / min(disk), 3),
            "requests_per_round": [s["requests"] for s in samples[f"{job}_gcs"]],
            "requests_per_input": {kind: round(n / units, 4)
                                   for kind, n in sorted(requests.items())},
        }
    return {"jobs": jobs}


CHART = harness.Chart("job seconds by store", lambda result: {
    f"{job} {where}": entry[f"{where}_s"] for job, entry in result["jobs"].items()
    for where in ("disk", "gcs")}, unit="s")


if __name__ == "__main__":
    main()
