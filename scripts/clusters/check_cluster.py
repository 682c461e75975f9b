"""Both jobs on a cluster of separate hosts (scripts/flink.sh, scripts/spark.sh),
byte-identical to the default runner.

    python scripts/clusters/check_cluster.py flink [--runs images,timeseries]
    python scripts/clusters/check_cluster.py flink --kill_host

1. ``bash scripts/<cluster>.sh up``; its last line is the Beam flags. ``env`` gives
   the launcher's environment (the storage host's URL, no credentials), which this
   script takes as its own and its jobs inherit;
2. writes small fixtures (an image folder with every fixture format and the
   known-bad files; a long-format series CSV) and uploads them to the storage host;
3. runs each job as a user would (``python -m pipelines.<job>``, a child process,
   the flags added), ``gs:// → gs://``, and the same job on the default runner (one
   worker, in this process) as the reference; requires the shards, ``manifest.json``,
   ``errors/rejected.jsonl`` (and the duplicate report and key index) to be
   byte-identical, and the counts to reconcile. While the first job runs, it checks
   from ``status`` and ``/proc/PID/ns`` that every worker process (the engine's
   workers and their SDK harnesses) is in a host of its own, sharing no network or
   mount namespace with this process or with another host, and that a worker host
   sees neither this checkout, its ``.venv`` nor this script's folder, only the
   shared folder;
4. ``bash scripts/<cluster>.sh down``, whatever happened.

``--kill_host`` instead runs the image job on a few hundred photos, kills every
process of one worker host (found with ``status``: a TaskManager, its boot binary
and harness; on Spark, whose round keeps master and worker on one host, the worker,
its executor and harness) once the first shard is finished, starts a replacement with ``up``,
and then requires the job either to finish through the engine's restart strategy or
to fail with one ``error:`` line, in which case the same command is run again;
either way the dataset must be byte-identical to the default runner's. It prints
which of the two happened.

Used by scripts/test.sh after pytest; docs/RUNNING_AT_SCALE.md.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO_ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
from tests import image_fixtures  # noqa: E402
from tests.gcs_server import download_tree, objects, upload_tree  # noqa: E402
from tests.job_runs import output_digests  # noqa: E402
from tests.series_fixtures import write_small_series_csv  # noqa: E402

BUCKET = "cluster"
JOBS = {
    "images": ("pipelines.images", "photos",
               ("--image_size=16", "--num_shards=2", "--max_error_fraction=0.5")),
    "timeseries": ("pipelines.timeseries", "series/rows.csv",
                   ("--window_size=6", "--shift=2", "--horizon=3")),
}
JOB_TIMEOUT_S = 900
# The processes that do the cluster's work, by status's role names.
WORKER_ROLES = {"taskmanager", "worker", "executor", "boot", "harness"}


class ClusterStorage:
    """The storage host, as tests.gcs_server's helpers take a server: ``client()``."""

    def client(self):
        from google.cloud import storage
        return storage.Client(project=os.environ["GOOGLE_CLOUD_PROJECT"])


def cluster(name: str, command: str) -> str:
    """Runs ``scripts/<name>.sh <command>``; returns its stdout (its log on failure)."""
    proc = subprocess.run(["bash", os.path.join(REPO_ROOT, "scripts", f"{name}.sh"), command],
                          capture_output=True, text=True, timeout=1200)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        sys.exit(f"scripts/{name}.sh {command} failed ({proc.returncode}):\n{proc.stdout}")
    return proc.stdout


def processes(name: str) -> list[tuple[str, str, int]]:
    """``status`` as (role, host, pid)."""
    return [(role, host, int(pid)) for role, host, pid in
            (line.split() for line in cluster(name, "status").splitlines() if line.strip())]


def job_environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items()
            if name not in ("PYTHONPATH", "GOOGLE_APPLICATION_CREDENTIALS")}


def run_reference(module: str, args: list[str]) -> None:
    """The default runner, one worker, in this process."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        importlib.import_module(module).run(args)


def download(prefix: str, work: str) -> str:
    dest = os.path.join(work, "downloads", prefix)
    shutil.rmtree(dest, ignore_errors=True)
    download_tree(ClusterStorage(), BUCKET, prefix, dest)
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


def namespaces(pid: int) -> tuple[str, str]:
    return tuple(os.readlink(f"/proc/{pid}/ns/{kind}") for kind in ("net", "mnt"))


class WorkerWatch:
    """Samples ``status`` while a job runs: every worker process seen, its host and
    namespaces (a harness lives only while the job needs it)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: dict[int, tuple[str, str, tuple[str, str]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> WorkerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            for role, host, pid in processes(self.name):
                if role in WORKER_ROLES and pid not in self.seen:
                    with contextlib.suppress(OSError):
                        self.seen[pid] = (role, host, namespaces(pid))

    def check(self, work: str) -> str:
        """Every worker in a host of its own; what a worker host can see."""
        mine = namespaces(os.getpid())
        roles = {role for role, _, _ in self.seen.values()}
        if "harness" not in roles:
            sys.exit(f"no SDK harness was seen while the job ran (roles: {sorted(roles)})")
        by_host: dict[str, set[tuple[str, str]]] = {}
        for pid, (role, host, spaces) in sorted(self.seen.items()):
            if spaces[0] == mine[0] or spaces[1] == mine[1]:
                sys.exit(f"{role} {pid} on {host} shares a namespace with the launcher")
            by_host.setdefault(host, set()).add(spaces)
        for host, spaces in by_host.items():
            if len(spaces) != 1:
                sys.exit(f"the processes of host {host} are in several namespaces: {spaces}")
            for other, other_spaces in by_host.items():
                if other != host and {s for pair in spaces for s in pair} & {
                        s for pair in other_spaces for s in pair}:
                    sys.exit(f"hosts {host} and {other} share a namespace")
        host, pid = next((host, pid) for pid, (role, host, _) in self.seen.items()
                         if role == "harness")
        alive = next((p for r, h, p in processes(self.name) if h == host), None)
        if alive is not None:
            shared = os.path.join(REPO_ROOT, ".clusters", self.name, "shared")
            for path, visible in ((os.path.join(REPO_ROOT, "setup.py"), False),
                                  (os.path.join(REPO_ROOT, ".venv"), False),
                                  (work, False), (shared, True)):
                seen = subprocess.run(["nsenter", "-t", str(alive), "-m", "test", "-e", path],
                                      check=False).returncode == 0
                if seen != visible:
                    sys.exit(f"host {host} {'cannot' if visible else 'can'} see {path}")
        counts = {role: sum(1 for r, _, _ in self.seen.values() if r == role)
                  for role in sorted(roles)}
        return (f"{len(by_host)} worker host(s) ({', '.join(sorted(by_host))}), each in its "
                f"own network and mount namespace, none the launcher's; seen {counts}; "
                f"host {host} sees neither the checkout, its .venv nor {work}, and sees "
                f"the shared folder")


def check_runs(name: str, jobs: list[str], flags: list[str], work: str) -> None:
    for index, job in enumerate(jobs):
        module, relpath, job_flags = JOBS[job]
        common = [f"--input=gs://{BUCKET}/{relpath}", *job_flags]
        ours_out, ref_out = (f"gs://{BUCKET}/out/{job}-{side}" for side in (name, "reference"))
        started = time.monotonic()
        watch = WorkerWatch(name)
        with watch if index == 0 else contextlib.nullcontext():
            proc = subprocess.run(
                [sys.executable, "-m", module, *common, f"--output_dir={ours_out}", *flags],
                cwd=REPO_ROOT, env=job_environment(), capture_output=True, text=True,
                timeout=JOB_TIMEOUT_S)
        elapsed = time.monotonic() - started
        if proc.returncode != 0 or "Wrote dataset" not in proc.stdout:
            sys.exit(f"{job} on {name} failed ({proc.returncode}):\n"
                     f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
        last = proc.stdout.strip().splitlines()[-1]
        if index == 0:
            print(watch.check(work), flush=True)
        run_reference(module, [*common, f"--output_dir={ref_out}",
                               f"--tft_temp_dir={work}/tft/{job}-reference"])
        ours, reference = (download(out[len(f"gs://{BUCKET}/"):], work)
                           for out in (ours_out, ref_out))
        compare(job, ours, reference)
        print(f"{job} gs:// → gs://: {name} {elapsed:.0f} s; shards, manifest and dead "
              f"letters byte-identical to the default runner's; {reconcile(ours, job)}; "
              f"its last line: {last!r}", flush=True)


def pending_shards(prefix: str) -> list[str]:
    """The shard objects written so far (a pending name appears once its shard is
    complete), sorted."""
    return sorted(n for n in objects(ClusterStorage(), BUCKET, prefix)
                  if "-pending-" in n and n.endswith(".tfrecord.gz"))


def wait_until_gone(pids: list[int], timeout_s: float = 30) -> None:
    """Until every pid has exited (a zombie counts: its parent reaps it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                        alive.append(pid)
            except FileNotFoundError:
                pass
        if not alive:
            return
        time.sleep(0.1)
    sys.exit(f"processes {pids} did not exit after kill -9")


def check_kill(name: str, flags: list[str], work: str) -> None:
    photos = os.path.join(work, "many_photos")
    image_fixtures.write_image_folder(photos, copies=24)
    image_fixtures.write_bad_files(photos)
    count = sum(len(files) for _, _, files in os.walk(photos))
    upload_tree(ClusterStorage(), photos, BUCKET, "many_photos")
    args = [f"--input=gs://{BUCKET}/many_photos", "--image_size=64", "--num_shards=8",
            "--max_error_fraction=0.5"]
    prefix = "out/kill"
    command = [sys.executable, "-m", "pipelines.images", *args,
               f"--output_dir=gs://{BUCKET}/{prefix}", *flags]
    started = time.monotonic()
    # Its output to files, which (unlike a pipe read only at the end) never fill up
    # and stall the job while this script waits for a shard.
    stdout_path, stderr_path = (os.path.join(work, f"kill-job.{kind}")
                                for kind in ("stdout", "stderr"))
    with open(stdout_path, "w") as stdout_file, open(stderr_path, "w") as stderr_file:
        job = subprocess.Popen(command, cwd=REPO_ROOT, env=job_environment(),
                               stdout=stdout_file, stderr=stderr_file, text=True)

    def job_output() -> tuple[str, str]:
        with open(stdout_path) as f, open(stderr_path) as g:
            return f.read(), g.read()

    while not pending_shards(prefix):
        if job.poll() is not None:
            sys.exit(f"the job ended before writing a shard:\n{job_output()[1][-3000:]}")
        if time.monotonic() - started > JOB_TIMEOUT_S:
            job.kill()
            sys.exit("no shard was finished in time")
        time.sleep(0.5)
    finished_before = pending_shards(prefix)
    before = processes(name)
    hosts = sorted({host for role, host, _ in before if role in WORKER_ROLES})
    victim = hosts[-1]
    # Flink: every process of a TaskManager's host. Spark's round keeps its master and
    # its worker on one host, so there the worker goes, with its executor and
    # harness, and the master stays.
    victims = [(role, pid) for role, host, pid in before
               if host == victim and (name == "flink" or role in WORKER_ROLES)]
    for _, pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
    wait_until_gone([pid for _, pid in victims])
    what = f"every process of host {victim}" if name == "flink" else f"the worker on {victim}"
    print(f"{count} files; {len(finished_before)} shard(s) finished "
          f"({', '.join(os.path.basename(p) for p in finished_before)}) after "
          f"{time.monotonic() - started:.0f} s: kill -9 {what}: "
          f"{', '.join(f'{role} {pid}' for role, pid in victims)}", flush=True)
    cluster(name, "up")
    print(f"scripts/{name}.sh up started a replacement host:\n"
          + cluster(name, "status").rstrip(), flush=True)
    job.wait(timeout=JOB_TIMEOUT_S)
    stdout, stderr = job_output()
    if job.returncode == 0 and "Wrote dataset" in stdout:
        print(f"the job finished through the engine's restart strategy "
              f"({time.monotonic() - started:.0f} s in all)", flush=True)
    else:
        errors = [line for line in stderr.splitlines() if line.startswith("error:")]
        print(f"the job failed (exit {job.returncode}); its last line: "
              f"{stderr.strip().splitlines()[-1] if stderr.strip() else ''!r}", flush=True)
        if len(errors) != 1:
            sys.exit(f"expected one error: line, got {errors}:\n{stderr[-6000:]}")
        rerun = subprocess.run(command, cwd=REPO_ROOT, env=job_environment(),
                               capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
        if rerun.returncode != 0:
            sys.exit(f"the rerun failed:\n{rerun.stdout[-3000:]}\n{rerun.stderr[-6000:]}")
        resumed = [line.strip() for line in rerun.stdout.splitlines() if "resumed" in line]
        print(f"the same command rerun finished: {resumed}", flush=True)
    reference = os.path.join(work, "out", "kill-reference")
    run_reference("pipelines.images", [*args, f"--output_dir={reference}",
                                       f"--tft_temp_dir={work}/tft/kill-reference"])
    ours = download(prefix, work)
    compare("the killed run", ours, reference)
    print(f"byte-identical to the default runner's dataset; {reconcile(ours, 'images')}",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cluster", choices=("flink", "spark"))
    parser.add_argument("--runs", default=",".join(JOBS),
                        help="comma-separated jobs (default: %(default)s)")
    parser.add_argument("--kill_host", action="store_true",
                        help="the host-kill check instead")
    parser.add_argument("--keep", action="store_true",
                        help="keep the scratch folder and the cluster")
    args = parser.parse_args()
    jobs = [job for job in args.runs.split(",") if job]
    unknown = sorted(set(jobs) - set(JOBS))
    if unknown:
        parser.error(f"unknown jobs {unknown}; choose from {', '.join(JOBS)}")

    work = tempfile.mkdtemp(prefix=f"check_{args.cluster}.")
    try:
        started = time.monotonic()
        flags = cluster(args.cluster, "up").strip().splitlines()[-1].split()
        print(f"scripts/{args.cluster}.sh up: {time.monotonic() - started:.0f} s; "
              f"flags: {' '.join(flags)}", flush=True)
        try:
            for line in cluster(args.cluster, "env").splitlines():
                variable, _, value = line.partition("=")
                os.environ[variable] = value
            os.environ.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
            with contextlib.suppress(Exception):  # A second round finds it there.
                ClusterStorage().client().create_bucket(BUCKET)
            local = os.path.join(work, "local")
            image_fixtures.write_image_folder(os.path.join(local, "photos"), copies=1)
            image_fixtures.write_bad_files(os.path.join(local, "photos"))
            write_small_series_csv(os.path.join(local, "series", "rows.csv"))
            for folder in ("photos", "series"):
                upload_tree(ClusterStorage(), os.path.join(local, folder), BUCKET, folder)
            if args.kill_host:
                check_kill(args.cluster, flags, work)
            else:
                check_runs(args.cluster, jobs, flags, work)
        finally:
            if not args.keep:
                cluster(args.cluster, "down")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"OK: {args.cluster} round passed", flush=True)


if __name__ == "__main__":
    main()
