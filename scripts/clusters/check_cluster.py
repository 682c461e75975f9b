"""Both jobs on a local Flink or Spark cluster, byte-identical to the default runner.

    python scripts/clusters/check_cluster.py flink [--runs images:disk,timeseries:gs]
    python scripts/clusters/check_cluster.py flink --kill_taskmanager

1. writes small fixtures (an image folder with every fixture format and the known-bad
   files; a long-format series CSV) and starts a local GCS server with a copy of them;
2. ``bash scripts/<cluster>.sh up`` with the server's hermetic environment (so the
   worker pool's harnesses reach it), and takes its last line as the Beam flags;
3. runs each requested job as a user would (``python -m pipelines.<job>``, a child
   process, the flags added) on local disk or on ``gs://``, and the same job on the
   default runner (one worker, in this process) as the reference; requires the
   shards, ``manifest.json`` and ``errors/rejected.jsonl`` (and the duplicate
   report and key index) to be byte-identical, and the counts to reconcile;
4. ``bash scripts/<cluster>.sh down``, whatever happened.

``--kill_taskmanager`` (Flink) instead runs the image job on a few hundred photos,
``kill -9``s one TaskManager (found with ``status``) once the first shard is
finished, starts a replacement with ``up``, and then requires the job either to
finish through Flink's restart strategy or to fail with one ``error:`` line, in
which case the same command is run again; either way the dataset must be
byte-identical to the default runner's. It prints which of the two happened.

Used by scripts/test.sh after pytest (the Flink round); docs/RUNNING_AT_SCALE.md.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import importlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO_ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
from tests import image_fixtures  # noqa: E402
from tests.gcs_server import GcsServer, download_tree, upload_tree  # noqa: E402
from tests.job_runs import output_digests  # noqa: E402
from tests.series_fixtures import write_small_series_csv  # noqa: E402

BUCKET = "cluster"
JOBS = {
    "images": ("pipelines.images", "photos",
               ("--image_size=16", "--num_shards=2", "--max_error_fraction=0.5")),
    "timeseries": ("pipelines.timeseries", "series/rows.csv",
                   ("--window_size=6", "--shift=2", "--horizon=3")),
}
ALL_RUNS = ("images:disk", "images:gs", "timeseries:disk", "timeseries:gs")
JOB_TIMEOUT_S = 900


def cluster(name: str, command: str, env: dict[str, str]) -> str:
    """Runs ``scripts/<name>.sh <command>``; returns its stdout (its log on failure)."""
    proc = subprocess.run(["bash", os.path.join(REPO_ROOT, "scripts", f"{name}.sh"), command],
                          env=env, capture_output=True, text=True, timeout=900)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        sys.exit(f"scripts/{name}.sh {command} failed ({proc.returncode}):\n{proc.stdout}")
    return proc.stdout


def run_job_command(module: str, args: list[str], env: dict[str, str]
                    ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=JOB_TIMEOUT_S)


def run_reference(module: str, args: list[str]) -> None:
    """The default runner, one worker, in this process."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        importlib.import_module(module).run(args)


def local_copy(server: GcsServer, output: str, work: str) -> str:
    """The folder holding ``output``'s files: itself, or a download of a gs:// one."""
    if not output.startswith("gs://"):
        return output
    prefix = output[len(f"gs://{BUCKET}/"):]
    dest = os.path.join(work, "downloads", prefix)
    shutil.rmtree(dest, ignore_errors=True)
    download_tree(server, BUCKET, prefix, dest)
    return dest


def reconcile(folder: str, job: str) -> str:
    """The manifest's counts; for the image job, inputs = written + rejected (the
    time-series job counts rows in and windows out, and checks its own rows)."""
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    written = sum(split["num_records"] for split in manifest["splits"].values())
    rejected = manifest["rejected"]["count"]
    if job == "images" and manifest["inputs"] != written + rejected:
        sys.exit(f"{folder}: {manifest['inputs']} inputs != {written} written + "
                 f"{rejected} rejected")
    return f"inputs {manifest['inputs']}, written {written}, rejected {rejected}"


def compare(name: str, ours: str, reference: str) -> None:
    a, b = output_digests(ours), output_digests(reference)
    if "manifest.json" not in b or a != b:
        differing = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        sys.exit(f"{name}: the cluster's output differs from the default runner's in "
                 f"{differing}")


def check_runs(cluster_name: str, runs: list[str], flags: list[str], server: GcsServer,
               env: dict[str, str], work: str) -> None:
    for run in runs:
        job, where = run.split(":")
        module, relpath, job_flags = JOBS[job]
        base = os.path.join(work, "local") if where == "disk" else f"gs://{BUCKET}"
        source = os.path.join(base, relpath) if where == "disk" else f"{base}/{relpath}"
        common = [f"--input={source}", *job_flags]
        ours_out, ref_out = (os.path.join(work, "out", f"{run}-{side}") if where == "disk"
                             else f"gs://{BUCKET}/out/{job}-{side}"
                             for side in (cluster_name, "reference"))
        started = time.monotonic()
        proc = run_job_command(module, [*common, f"--output_dir={ours_out}",
                                        f"--tft_temp_dir={work}/tft/{run}-cluster", *flags],
                               env)
        elapsed = time.monotonic() - started
        if proc.returncode != 0 or "Wrote dataset" not in proc.stdout:
            sys.exit(f"{run} on {cluster_name} failed ({proc.returncode}):\n"
                     f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
        run_reference(module, [*common, f"--output_dir={ref_out}",
                               f"--tft_temp_dir={work}/tft/{run}-reference"])
        ours, reference = (local_copy(server, out, work) for out in (ours_out, ref_out))
        compare(run, ours, reference)
        print(f"{run}: {cluster_name} {elapsed:.0f} s; shards, manifest and dead letters "
              f"byte-identical to the default runner's; {reconcile(ours, job)}", flush=True)


def finished_shards(output_dir: str) -> list[str]:
    """The shard files written so far (a pending name appears once its shard is
    complete), sorted."""
    return sorted(glob.glob(os.path.join(output_dir, "*", "*-pending-*.tfrecord.gz")))


def wait_until_gone(pid: int, timeout_s: float = 30) -> None:
    """Until ``pid`` has exited (a zombie counts: its parent, init, reaps it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except FileNotFoundError:
            return
        time.sleep(0.1)
    sys.exit(f"process {pid} did not exit after kill -9")


def check_kill(flags: list[str], env: dict[str, str], work: str) -> None:
    photos = os.path.join(work, "many_photos")
    image_fixtures.write_image_folder(photos, copies=24)
    image_fixtures.write_bad_files(photos)
    count = sum(len(files) for _, _, files in os.walk(photos))
    args = [f"--input={photos}", "--image_size=64", "--num_shards=8",
            "--max_error_fraction=0.5"]
    out = os.path.join(work, "out", "kill-flink")
    command = [sys.executable, "-m", "pipelines.images", *args, f"--output_dir={out}",
               *flags]
    started = time.monotonic()
    # Its output to files, which (unlike a pipe read only at the end) never fill up
    # and stall the job while this script waits for a shard.
    stdout_path, stderr_path = (os.path.join(work, f"kill-job.{name}")
                                for name in ("stdout", "stderr"))
    with open(stdout_path, "w") as stdout_file, open(stderr_path, "w") as stderr_file:
        job = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=stdout_file,
                               stderr=stderr_file, text=True)

    def job_output() -> tuple[str, str]:
        with open(stdout_path) as f, open(stderr_path) as g:
            return f.read(), g.read()

    while not finished_shards(out):
        if job.poll() is not None:
            sys.exit(f"the job ended before writing a shard:\n{job_output()[1][-3000:]}")
        if time.monotonic() - started > JOB_TIMEOUT_S:
            job.kill()
            sys.exit("no shard was finished in time")
        time.sleep(0.2)
    finished_before = finished_shards(out)
    taskmanagers = [line.split()[1] for line in cluster("flink", "status", env).splitlines()
                    if line.startswith("taskmanager ")]
    victim = taskmanagers[-1]
    os.kill(int(victim), 9)
    wait_until_gone(int(victim))
    print(f"{count} files; {len(finished_before)} shard(s) finished "
          f"({', '.join(os.path.basename(p) for p in finished_before)}) after "
          f"{time.monotonic() - started:.0f} s: kill -9 taskmanager {victim}", flush=True)
    cluster("flink", "up", env)
    print("scripts/flink.sh up started a replacement TaskManager:\n"
          + cluster("flink", "status", env).rstrip(), flush=True)
    job.wait(timeout=JOB_TIMEOUT_S)
    stdout, stderr = job_output()
    if job.returncode == 0 and "Wrote dataset" in stdout:
        print(f"the job finished through Flink's restart strategy "
              f"({time.monotonic() - started:.0f} s in all)", flush=True)
    else:
        errors = [line for line in stderr.splitlines() if line.startswith("error:")]
        print(f"the job failed (exit {job.returncode}); its last line: "
              f"{stderr.strip().splitlines()[-1] if stderr.strip() else ''!r}", flush=True)
        if len(errors) != 1:
            sys.exit(f"expected one error: line, got {errors}:\n{stderr[-6000:]}")
        kept = [p for p in finished_before if os.path.exists(p)]
        rerun = run_job_command("pipelines.images", command[3:], env)
        if rerun.returncode != 0:
            sys.exit(f"the rerun failed:\n{rerun.stdout[-3000:]}\n{rerun.stderr[-6000:]}")
        print(f"the same command rerun finished; {len(kept)} of the "
              f"{len(finished_before)} finished shard(s) were still there for it",
              flush=True)
    reference = os.path.join(work, "out", "kill-reference")
    run_reference("pipelines.images", [*args, f"--output_dir={reference}"])
    compare("the killed run", out, reference)
    print(f"byte-identical to the default runner's dataset; {reconcile(out, 'images')}",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cluster", choices=("flink", "spark"))
    parser.add_argument("--runs", default=",".join(ALL_RUNS),
                        help="comma-separated JOB:WHERE, WHERE disk or gs "
                             "(default: %(default)s)")
    parser.add_argument("--kill_taskmanager", action="store_true",
                        help="the TaskManager-kill check instead (flink only)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args()
    runs = [run for run in args.runs.split(",") if run]
    unknown = sorted(set(runs) - set(ALL_RUNS))
    if unknown:
        parser.error(f"unknown runs {unknown}; choose from {', '.join(ALL_RUNS)}")
    if args.kill_taskmanager and args.cluster != "flink":
        parser.error("--kill_taskmanager is for flink")

    work = tempfile.mkdtemp(prefix=f"check_{args.cluster}.")
    local = os.path.join(work, "local")
    image_fixtures.write_image_folder(os.path.join(local, "photos"), copies=1)
    image_fixtures.write_bad_files(os.path.join(local, "photos"))
    write_small_series_csv(os.path.join(local, "series", "rows.csv"))
    try:
        with GcsServer(os.path.join(work, "gcs")) as server:
            os.makedirs(os.path.join(work, "gcloud_config"))
            hermetic = server.hermetic_environment(os.path.join(work, "gcloud_config"))
            os.environ.update(hermetic)
            env = {name: value for name, value in os.environ.items()
                   if name not in ("PYTHONPATH", "GOOGLE_APPLICATION_CREDENTIALS")}
            server.create_bucket(BUCKET)
            for folder in ("photos", "series"):
                upload_tree(server, os.path.join(local, folder), BUCKET, folder)
            started = time.monotonic()
            flags = cluster(args.cluster, "up", env).strip().splitlines()[-1].split()
            print(f"scripts/{args.cluster}.sh up: {time.monotonic() - started:.0f} s; "
                  f"flags: {' '.join(flags)}", flush=True)
            try:
                if args.kill_taskmanager:
                    check_kill(flags, env, work)
                else:
                    check_runs(args.cluster, runs, flags, server, env, work)
            finally:
                cluster(args.cluster, "down", env)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"OK: {args.cluster} round passed", flush=True)


if __name__ == "__main__":
    main()
