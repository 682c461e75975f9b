"""Cluster benchmark: both jobs on a local Flink cluster against the default runner, two workers.

Measured side by side in one run, for each job and runner:

  flink        python -m pipelines.<job> with the flags ``scripts/flink.sh up`` prints
               (FlinkRunner, a JobManager, two TaskManagers of one slot each, the Beam
               worker pool of pipelines/worker_pool.py, --parallelism=2);
  direct_mp2   the same command on the default runner with
               --direct_num_workers=2 --direct_running_mode=multi_processing.

Inputs: --num_images web-size photos (scripts/benchmarks/sample_photos.py, default 2,000) for
the image job, with the flags scripts/benchmarks/image_job.py gives it (--image_size=224
--jpeg_quality=95 --overwrite: the job's defaults); --series hourly series x --hours
hours of the long-format CSV of scripts/benchmarks/series_job.py (default 375 x 8,000
= 3,000,000 rows) for the time-series job, with that script's flags
(--window_size=168 --shift=24 --horizon=24 --missing=interpolate). Both are
generated once into --work_dir and reused.

Per run (a fresh output folder each time, tf.Transform's scratch folder outside it):

  wall_s       the job command, from just before the launcher process is started
               to its exit (interpreter start, imports, job server, submission and
               the job itself);
  startup_s    submit -> first shard: from the same start until a finished shard
               file (``*.tfrecord.gz``, pending or final: a pending name appears only
               once its shard is complete) first shows under the output folder,
               polled every 0.1 s; None if none was seen before the launcher exited;
  peak_mib     the peak, over samples every 0.2 s, of the summed RSS (psutil) of the
               launcher and all its descendants (Flink: the Java job server; default
               runner: its worker processes) plus, for Flink, the JobManager, the
               TaskManagers and the worker pool with all their descendants (the fork
               server and the SDK harnesses it forks), pids from
               ``scripts/flink.sh status``; peak_launcher_mib and peak_cluster_mib are
               the two parts' own peaks (not necessarily at the same instant), and
               idle_cluster_mib is the cluster's RSS just before the launcher starts;
               mib_by_role splits the figures by launcher, jobmanager, taskmanager
               and worker_pool (idle, at the total's peak, own peak).
               RSS counts pages shared between processes (forked harnesses share the
               fork server's imports) once per process, so the sum overstates the
               memory in use; it is what a per-process limit would see. The
               TaskManagers' and JobManager's JVMs keep the heap a job made them
               grow, so a cluster's idle RSS (and with it the Flink peak) depends on
               what ran on it before: compare idle_cluster_mib across runs.

Rounds (--rounds, default 3) alternate the runners' order round by round; medians
and best rounds (the lowest value of each figure) are reported side by side. Before
each run its input is read into the page cache; other processes' CPU meanwhile
(busy CPU minus this process tree's and the Flink processes') is recorded, and a run
taken while it exceeded --max_foreign cores is retried (up to --retries times), each
try first waiting up to --max_wait s for a quiet machine. Flink's cluster processes
are not this script's children, and a job another user submits to the same cluster
meanwhile counts as ours: the number of jobs the cluster was running when each Flink
run started is recorded (``other_flink_jobs``).

The cluster: if ``scripts/flink.sh status`` lists no process, this script runs
``scripts/flink.sh up`` itself (with TF_NUM_INTRAOP_THREADS=1 in its environment, as
the image job sets for itself and its local workers, so that the worker pool's
harnesses inherit it) and ``scripts/flink.sh down`` at the end, whatever happened;
if it lists all of jobmanager, taskmanager x 2 and worker_pool, it uses that cluster
(``up`` starts nothing then, and only prints the flags) and leaves it running; a
partial cluster is refused. The worker pool's TF_NUM_INTRAOP_THREADS is recorded.

Every run must exit 0 and leave a manifest.json; otherwise the benchmark stops with
the run's stderr tail (logs in <work_dir>/clusters_logs).

Usage (the full measurement; --quick: 40 photos, 20,000 rows, 1 round, no waiting
for a quiet machine, results in <work_dir>/clusters.json unless --out):

    nice -n 19 python -m scripts.benchmarks clusters --work_dir /work/bench_data \\
        --rounds 3
    python -m scripts.benchmarks clusters --work_dir /tmp/bench_clusters --quick
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

import harness
import psutil
from sample_photos import describe, ensure_photos
from series_job import ensure_input

BENCHMARK = harness.Benchmark(
    name="clusters",
    measures="both jobs on local Flink and Spark clusters against the default runner",
    quick=("--quick", "--work_dir", "{quick_dir}/clusters", "--out", "{quick_dir}/clusters.json"),
)


JOBS = {"images": "pipelines.images", "timeseries": "pipelines.timeseries"}
RUNNERS = ("flink", "direct_mp2")
DIRECT_MP2 = ("--direct_num_workers=2", "--direct_running_mode=multi_processing")
FLINK_ROLES = collections.Counter({"jobmanager": 1, "taskmanager": 2, "worker_pool": 1})
FLINK_SH = os.path.join(harness.REPO_ROOT, "scripts", "flink.sh")
# pipelines.images.INTRA_OP_THREADS_ENV, which its run_ops_on_one_thread_each() sets to
# 1 unless set; not imported, so that this process stays without TensorFlow and Beam.
INTRA_OP_THREADS_ENV = "TF_NUM_INTRAOP_THREADS"
POLL_S = 0.1
MEMORY_EVERY_S = 0.2
# --quick: what the inputs and sampling become unless given explicitly.
QUICK = {"num_images": 40, "series": 10, "hours": 2000, "rounds": 1, "retries": 0,
         "max_wait": 0.0}
FULL = {"num_images": 2000, "series": 375, "hours": 8000, "rounds": 3, "retries": 3,
        "max_wait": 300.0}


# --- the cluster -----------------------------------------------------------------------

def flink_sh(command: str) -> tuple[str, str]:
    """``bash scripts/flink.sh COMMAND``'s stdout and stderr; exits with them on
    failure."""
    proc = subprocess.run(["bash", FLINK_SH, command], cwd=harness.REPO_ROOT, capture_output=True,
                          text=True, timeout=1800)
    if proc.returncode != 0:
        sys.exit(f"scripts/flink.sh {command} failed ({proc.returncode}):\n"
                 f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc.stdout, proc.stderr


def cluster_pids() -> dict[str, list[int]]:
    """The running cluster's pids by role (``scripts/flink.sh status``)."""
    roles: dict[str, list[int]] = collections.defaultdict(list)
    for line in flink_sh("status")[0].splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            roles[parts[0]].append(int(parts[1]))
    return dict(roles)


def _role_counts(roles: dict[str, list[int]]) -> collections.Counter:
    return collections.Counter({role: len(pids) for role, pids in roles.items()})


class FlinkCluster:
    """The cluster the Flink runs use: the running one, or one this script starts
    (and stops in :meth:`close`)."""

    def __init__(self) -> None:
        before = cluster_pids()
        if before and _role_counts(before) != FLINK_ROLES:
            sys.exit(f"scripts/flink.sh status lists a partial cluster {before}; "
                     f"expected {dict(FLINK_ROLES)}. Not touching it: bring it up or "
                     f"down first.")
        started = time.monotonic()
        # A running cluster: `up` starts nothing and prints the flags again. What it
        # starts, it reports on stderr ("started jobmanager PID"): only those
        # processes are this script's to stop.
        self.up_output, up_log = flink_sh("up")
        self.up_s = time.monotonic() - started
        self.started_pids = {int(line.split()[-1]) for line in up_log.splitlines()
                             if line.startswith("started ") and line.split()[-1].isdigit()}
        self.started_here = bool(self.started_pids)
        self.flags = self.up_output.strip().splitlines()[-1].split()
        if not any(flag.startswith("--runner=") for flag in self.flags):
            self.close()
            sys.exit(f"scripts/flink.sh up printed no Beam flags:\n{self.up_output}")
        self.roles = cluster_pids()
        if _role_counts(self.roles) != FLINK_ROLES:
            self.close()
            sys.exit(f"after scripts/flink.sh up: {self.roles}, expected "
                     f"{dict(FLINK_ROLES)}")
        master = next(f.split("=", 1)[1] for f in self.flags
                      if f.startswith("--flink_master="))
        self.rest = f"http://{master}"

    @property
    def pids(self) -> list[int]:
        return [pid for pids in self.roles.values() for pid in pids]

    def check_alive(self) -> None:
        """Exits if the cluster's processes changed (someone brought it down or
        restarted a process)."""
        now = cluster_pids()
        if now != self.roles:
            sys.exit(f"the Flink cluster changed under the benchmark: {self.roles} -> "
                     f"{now}")

    def running_jobs(self) -> int | None:
        """How many jobs the JobManager lists as not finished (None if unreachable)."""
        try:
            with urllib.request.urlopen(f"{self.rest}/jobs/overview", timeout=5) as r:
                jobs = json.load(r)["jobs"]
        except (OSError, ValueError, KeyError):
            return None
        return sum(job.get("state") not in ("FINISHED", "FAILED", "CANCELED")
                   for job in jobs)

    def worker_pool_env(self, name: str) -> str | None:
        """``name`` in the worker pool's environment (what its harnesses inherit)."""
        try:
            return psutil.Process(self.roles["worker_pool"][0]).environ().get(name)
        except (psutil.Error, KeyError, IndexError):
            return None

    def describe(self) -> dict[str, Any]:
        return {"started_by_this_script": self.started_here,
                "up_s": round(self.up_s, 1), "pids": self.roles, "flags": self.flags,
                "worker_pool_" + INTRA_OP_THREADS_ENV.lower():
                    self.worker_pool_env(INTRA_OP_THREADS_ENV)}

    def close(self) -> None:
        """``scripts/flink.sh down`` if this script started the cluster and it still
        runs only processes this script started."""
        if not self.started_here:
            return
        now = {pid for pids in cluster_pids().values() for pid in pids}
        if now - self.started_pids:
            print(f"not stopping the Flink cluster: it now runs processes this script "
                  f"did not start ({sorted(now - self.started_pids)})", flush=True)
            return
        print(flink_sh("down")[0].rstrip(), flush=True)


# --- process trees ---------------------------------------------------------------------

def process_trees(roots: dict[str, list[int]]) -> dict[str, set[int]]:
    """Each group's roots and all their live descendants, from one scan of the
    process table."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    live = set()
    for proc in psutil.process_iter(["ppid"]):
        live.add(proc.pid)
        children[proc.info["ppid"]].append(proc.pid)
    trees = {}
    for group, pids in roots.items():
        seen: set[int] = set()
        stack = [pid for pid in pids if pid in live]
        while stack:
            pid = stack.pop()
            if pid not in seen:
                seen.add(pid)
                stack.extend(children.get(pid, ()))
        trees[group] = seen
    return trees


def _rss(pids: set[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:  # Gone meanwhile.
            pass
    return total


def trees_cpu_seconds(roots: list[int]) -> float:
    """CPU seconds of the processes under ``roots``, including the exited children
    they reaped (the fork server reaps the harnesses it forked)."""
    total = 0.0
    for pid in process_trees({"all": roots})["all"]:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def rss_by_role(roots: dict[str, list[int]]) -> tuple[dict[str, int], int]:
    """The summed RSS of each role's process trees, and how many processes."""
    trees = process_trees(roots)
    return ({role: _rss(pids) for role, pids in trees.items()},
            sum(len(pids) for pids in trees.values()))


class MemorySampler(threading.Thread):
    """Every ``MEMORY_EVERY_S``: the summed RSS of the launcher's tree and of each
    cluster role's trees; keeps the peaks: of the total (and its parts then), of the
    launcher, of the cluster, and of each role."""

    def __init__(self, launcher: int, cluster: dict[str, list[int]]) -> None:
        super().__init__(name="memory-sampler", daemon=True)
        self._roots = {"launcher": [launcher], **cluster}
        self._stop_event = threading.Event()
        self.samples = 0
        self.peak_total = self.peak_launcher = self.peak_cluster = 0
        self.peak_by_role: dict[str, int] = dict.fromkeys(self._roots, 0)
        self.at_peak_by_role: dict[str, int] = {}
        self.peak_processes = 0
        self.max_processes = 0

    def sample(self) -> None:
        by_role, processes = rss_by_role(self._roots)
        launcher = by_role["launcher"]
        cluster = sum(by_role.values()) - launcher
        self.samples += 1
        self.peak_launcher = max(self.peak_launcher, launcher)
        self.peak_cluster = max(self.peak_cluster, cluster)
        for role, rss in by_role.items():
            self.peak_by_role[role] = max(self.peak_by_role[role], rss)
        self.max_processes = max(self.max_processes, processes)
        if launcher + cluster > self.peak_total:
            self.peak_total, self.peak_processes = launcher + cluster, processes
            self.at_peak_by_role = by_role

    def run(self) -> None:
        next_at = time.monotonic()
        while not self._stop_event.is_set():
            self.sample()
            next_at += MEMORY_EVERY_S
            self._stop_event.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def kill_tree(pid: int) -> None:
    """Kills the process ``pid`` (this script's launcher) and its descendants."""
    try:
        parent = psutil.Process(pid)
        procs = [*parent.children(recursive=True), parent]
    except psutil.Error:
        return
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass


# --- one run ---------------------------------------------------------------------------

def first_shard(output_dir: str) -> bool:
    return bool(glob.glob(os.path.join(output_dir, "**", "*.tfrecord.gz"), recursive=True))


def _tail(path: str, chars: int) -> str:
    with open(path, errors="replace") as f:
        return f.read()[-chars:]


def run_job(command: list[str], output_dir: str, log_prefix: str,
            cluster: dict[str, list[int]], timeout_s: float) -> dict[str, Any]:
    """Runs ``command`` (a job launcher) once and measures it; exits, with the
    stderr tail, unless it exits 0 with a manifest.json in ``output_dir``."""
    stdout_path, stderr_path = log_prefix + ".stdout", log_prefix + ".stderr"
    idle_by_role = rss_by_role(cluster)[0] if cluster else {}
    exited = threading.Event()
    end: list[float] = []
    with open(stdout_path, "w") as out, open(stderr_path, "w") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(command, cwd=harness.REPO_ROOT, env=harness.job_env(), stdout=out,
                                stderr=err, stdin=subprocess.DEVNULL)

    def wait() -> None:
        proc.wait()
        end.append(time.perf_counter())
        exited.set()

    waiter = threading.Thread(target=wait, name="launcher-wait", daemon=True)
    waiter.start()
    sampler = MemorySampler(proc.pid, cluster)
    sampler.start()
    startup = None
    try:
        while not exited.wait(POLL_S):
            if startup is None and first_shard(output_dir):
                startup = time.perf_counter() - start
            if time.perf_counter() - start > timeout_s:
                kill_tree(proc.pid)
                exited.wait()
                sys.exit(f"{' '.join(command)} ran past {timeout_s:.0f} s; killed. "
                         f"stderr tail:\n{_tail(stderr_path, 6000)}")
    except BaseException:
        kill_tree(proc.pid)
        raise
    finally:
        sampler.stop()
    wall = end[0] - start
    if startup is None and first_shard(output_dir):
        startup = wall  # Appeared between the last poll and the exit.
    manifest_path = os.path.join(output_dir, "manifest.json")
    if proc.returncode != 0 or not os.path.exists(manifest_path):
        sys.exit(f"FAILED: {' '.join(command)}\nexit {proc.returncode}, manifest.json "
                 f"{'present' if os.path.exists(manifest_path) else 'missing'} "
                 f"(logs: {log_prefix}.std*)\nstdout tail:\n{_tail(stdout_path, 2000)}\n"
                 f"stderr tail:\n{_tail(stderr_path, 6000)}")
    manifest = harness.read_manifest(output_dir)
    return {"wall_s": round(wall, 3),
            "startup_s": None if startup is None else round(startup, 3),
            "peak_mib": round(sampler.peak_total / harness.MIB, 1),
            "peak_launcher_mib": round(sampler.peak_launcher / harness.MIB, 1),
            "peak_cluster_mib": round(sampler.peak_cluster / harness.MIB, 1),
            "idle_cluster_mib": round(sum(idle_by_role.values()) / harness.MIB, 1),
            "mib_by_role": {role: {"idle": _mib(idle_by_role.get(role)),
                                   "at_peak": _mib(sampler.at_peak_by_role.get(role)),
                                   "peak": _mib(sampler.peak_by_role[role])}
                            for role in sampler.peak_by_role},
            "processes_at_peak": sampler.peak_processes,
            "max_processes": sampler.max_processes,
            "memory_samples": sampler.samples,
            "inputs": manifest["inputs"], **harness.output_summary(manifest)}


def _mib(value: int | None) -> float | None:
    return None if value is None else round(value / harness.MIB, 1)


def measured_run(command: list[str], output_dir: str, tft_dir: str, log_prefix: str,
                 inputs: list[str], cluster: FlinkCluster | None,
                 args: argparse.Namespace) -> dict[str, Any]:
    """:func:`run_job` on a quiet machine: retried (up to --retries) when other
    processes used more than --max_foreign cores meanwhile."""
    attempts: list[float] = []
    for attempt in range(args.retries + 1):
        if args.max_wait:
            harness.wait_for_quiet(args.max_foreign, args.max_wait)
        harness.warm_page_cache(inputs)
        for folder in (output_dir, tft_dir):
            shutil.rmtree(folder, ignore_errors=True)
        other_jobs = None
        if cluster is not None:
            cluster.check_alive()
            other_jobs = cluster.running_jobs()
        cluster_roots = cluster.pids if cluster is not None else []
        busy0, own0 = harness.busy_cpu_seconds(), harness.own_cpu_seconds()
        cluster0 = trees_cpu_seconds(cluster_roots) if cluster_roots else 0.0
        record = run_job(command, output_dir, f"{log_prefix}_try{attempt}",
                         cluster.roles if cluster is not None else {},
                         args.job_timeout)
        cluster_cpu = (trees_cpu_seconds(cluster_roots) - cluster0) if cluster_roots else 0.0
        own = harness.own_cpu_seconds() - own0
        busy = harness.busy_cpu_seconds() - busy0
        foreign = max(0.0, busy - own - cluster_cpu) / record["wall_s"]
        record.update(cpu_s=round(own + cluster_cpu, 2), cluster_cpu_s=round(cluster_cpu, 2),
                      foreign_cores=round(foreign, 3))
        if cluster is not None:
            record["other_flink_jobs"] = other_jobs
        attempts.append(record["foreign_cores"])
        if foreign <= args.max_foreign:
            break
        if attempt < args.retries:
            print(f"    (other processes used {foreign:.2f} cores: retrying)", flush=True)
            time.sleep(10)
    record["attempts_foreign"] = attempts
    shutil.rmtree(tft_dir, ignore_errors=True)
    return record


# --- results ---------------------------------------------------------------------------

FIGURES = ("wall_s", "startup_s", "peak_mib", "peak_launcher_mib", "peak_cluster_mib",
           "idle_cluster_mib")


def summarize(samples: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Median and best (lowest) round of each figure."""
    result: dict[str, dict[str, float | None]] = {}
    for figure in FIGURES:
        values = [s[figure] for s in samples if s.get(figure) is not None]
        spread = harness.spread(values, higher_is_better=False) if values else None
        result[figure] = {"median": round(spread["median"], 3) if spread else None,
                          "best": spread["best"] if spread else None}
    return result


def _cell(value: dict[str, float | None], spec: str) -> str:
    def fmt(v: float | None) -> str:
        return "n/a" if v is None else format(v, spec)

    return f"{fmt(value['median'])} ({fmt(value['best'])})"


def print_table(result: dict[str, Any]) -> None:
    print(f"\n{result['input']['images']['photos']} web photos, "
          f"{result['input']['timeseries']['rows']:,} series rows, {result['rounds']} "
          f"round(s); median (best round)")
    header = (f"{'job':<11}{'runner':<12}{'wall s':>16}{'first shard s':>16}"
              f"{'peak MiB':>18}{'launcher MiB':>18}{'cluster MiB':>18}{'idle MiB':>10}")
    print(header)
    print("-" * len(header))
    for key, entry in result["results"].items():
        job, runner = key.split("/")
        s = entry["summary"]
        print(f"{job:<11}{runner:<12}{_cell(s['wall_s'], '.1f'):>16}"
              f"{_cell(s['startup_s'], '.1f'):>16}{_cell(s['peak_mib'], '.0f'):>18}"
              f"{_cell(s['peak_launcher_mib'], '.0f'):>18}"
              f"{_cell(s['peak_cluster_mib'], '.0f'):>18}"
              f"{s['idle_cluster_mib']['median'] or 0:>10.0f}")
    for key, entry in result["results"].items():
        roles = entry["samples"][0]["mib_by_role"]
        if len(roles) > 1:
            def median_of(role: str, when: str, samples: list = entry["samples"]) -> float:
                return statistics.median(s["mib_by_role"][role][when] or 0 for s in samples)

            parts = ", ".join(f"{role} {median_of(role, 'at_peak'):.0f} (idle "
                              f"{median_of(role, 'idle'):.0f})" for role in roles)
            print(f"{key}: MiB by role at the peak (medians): {parts}")
    for job in JOBS:
        flink, direct = (result["results"].get(f"{job}/{r}") for r in RUNNERS)
        if flink and direct:
            f, d = flink["summary"], direct["summary"]
            wall = f["wall_s"]["median"] / d["wall_s"]["median"]
            peak = f["peak_mib"]["median"] / d["peak_mib"]["median"]
            print(f"{job}: flink / direct_mp2: wall time {wall:.2f} x, peak memory "
                  f"{peak:.2f} x (medians)")


# --- main ------------------------------------------------------------------------------

def main() -> None:
    # The image job sets TF_NUM_INTRAOP_THREADS=1 for itself and the workers it starts;
    # set here, a cluster this script starts passes it to the worker pool's harnesses.
    os.environ.setdefault(INTRA_OP_THREADS_ENV, "1")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default="/tmp/bench_clusters",
                        help="Inputs are generated (and reused) here; outputs and logs "
                             "go under it.")
    harness.add_result_flags(parser, "clusters", "images_<num_images>_series_<series>x<hours>")
    parser.add_argument("--quick", action="store_true",
                        help="Tiny inputs (40 photos, 10 x 2,000 rows), one round, no "
                             "retries or waiting for a quiet machine, unless given.")
    parser.add_argument("--num_images", type=int, default=None,
                        help=f"Web photos for the image job (default {FULL['num_images']}).")
    parser.add_argument("--series", type=int, default=None,
                        help=f"Hourly series (default {FULL['series']}).")
    parser.add_argument("--hours", type=int, default=None,
                        help=f"Hours per series (default {FULL['hours']}).")
    parser.add_argument("--window_size", type=int, default=168)
    parser.add_argument("--shift", type=int, default=24)
    parser.add_argument("--horizon", type=int, default=24)
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--jpeg_quality", type=int, default=95)
    parser.add_argument("--jobs", default=",".join(JOBS),
                        help="Comma-separated, of %(default)s.")
    parser.add_argument("--runners", default=",".join(RUNNERS),
                        help="Comma-separated, of %(default)s.")
    harness.add_sampling_flags(parser, rounds=FULL["rounds"])
    parser.add_argument("--max_wait", type=float, default=None,
                        help=f"Seconds to wait for a quiet machine before each run "
                             f"(default {FULL['max_wait']:.0f}; --quick 0).")
    parser.add_argument("--job_timeout", type=float, default=3600,
                        help="Kill a run (and fail) after this many seconds.")
    # None: the --quick or full default (QUICK, FULL).
    parser.set_defaults(rounds=None, retries=None)
    args = parser.parse_args()
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.quick and args.out == harness.result_path("clusters"):  # Not a result: not in the docs.
        args.out = os.path.join(args.work_dir, "clusters.json")
    jobs = [j for j in args.jobs.split(",") if j]
    runners = [r for r in args.runners.split(",") if r]
    if set(jobs) - set(JOBS) or set(runners) - set(RUNNERS) or not jobs or not runners:
        parser.error(f"--jobs of {list(JOBS)}, --runners of {list(RUNNERS)}")

    os.makedirs(args.work_dir, exist_ok=True)
    photos = ensure_photos(args.work_dir, args.num_images, verbose=True)
    photo_files = sorted(glob.glob(os.path.join(photos, "*", "*.jpg")))
    series_csv = ensure_input(args.work_dir, args.series, args.hours)
    out_root = os.path.join(args.work_dir, "clusters_out")
    logs = os.path.join(args.work_dir, "clusters_logs")
    os.makedirs(logs, exist_ok=True)
    job_flags = {
        "images": [f"--image_size={args.image_size}", f"--jpeg_quality={args.jpeg_quality}",
                   "--overwrite"],
        "timeseries": [f"--window_size={args.window_size}", f"--shift={args.shift}",
                       f"--horizon={args.horizon}", "--missing=interpolate", "--overwrite"],
    }
    job_inputs = {"images": (photos, photo_files), "timeseries": (series_csv, [series_csv])}

    cluster = FlinkCluster() if "flink" in runners else None
    samples: dict[str, list[dict[str, Any]]] = {f"{j}/{r}": [] for j in jobs for r in runners}
    try:
        if cluster is not None:
            how = "started by this script" if cluster.started_here else "already running"
            print(f"Flink cluster {how} ({cluster.up_s:.0f} s): {cluster.roles}\nflags: "
                  f"{' '.join(cluster.flags)}", flush=True)
            pool_threads = cluster.worker_pool_env(INTRA_OP_THREADS_ENV)
            if pool_threads != os.environ[INTRA_OP_THREADS_ENV]:
                print(f"note: the worker pool's harnesses run with {INTRA_OP_THREADS_ENV}="
                      f"{pool_threads} (this script and the default runner's workers: "
                      f"{os.environ[INTRA_OP_THREADS_ENV]}); a cluster this script "
                      f"starts gets the latter", flush=True)
        runner_flags = {"flink": cluster.flags if cluster else [], "direct_mp2": list(DIRECT_MP2)}
        for r in range(args.rounds):
            for job in jobs:
                source, files = job_inputs[job]
                for runner in harness.rotated(runners, r):
                    key = f"{job}/{runner}"
                    output_dir = os.path.join(out_root, f"{job}_{runner}")
                    tft_dir = os.path.join(out_root, f"{job}_{runner}.tft")
                    command = [sys.executable, "-m", JOBS[job], f"--input={source}",
                               f"--output_dir={output_dir}", f"--tft_temp_dir={tft_dir}",
                               *job_flags[job], *runner_flags[runner]]
                    record = measured_run(command, output_dir, tft_dir,
                                          os.path.join(logs, f"{job}_{runner}_r{r}"),
                                          files, cluster if runner == "flink" else None, args)
                    samples[key].append(record)
                    startup = ("n/a" if record["startup_s"] is None
                               else f"{record['startup_s']:.1f} s")
                    print(f"round {r + 1}/{args.rounds} {job:<10} {runner:<10} wall "
                          f"{record['wall_s']:7.1f} s  first shard {startup:>8}  peak "
                          f"{record['peak_mib']:7.0f} MiB (launcher "
                          f"{record['peak_launcher_mib']:.0f}, cluster "
                          f"{record['peak_cluster_mib']:.0f}, idle "
                          f"{record['idle_cluster_mib']:.0f})  (other processes: "
                          f"{record['foreign_cores']:.2f} cores)", flush=True)
        cluster_info = cluster.describe() if cluster is not None else None
    finally:
        if cluster is not None:
            cluster.close()
        shutil.rmtree(out_root, ignore_errors=True)

    series_rows = samples.get("timeseries/" + runners[0], [{}])[0].get("inputs")
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": harness.machine(tf_num_intraop_threads=os.environ[INTRA_OP_THREADS_ENV]),
        "code": harness.code_version(),
        "rounds": args.rounds,
        "quick": args.quick,
        "max_foreign_cores": args.max_foreign,
        "input": {
            "images": {"photos": len(photo_files), "tree": describe(photos)},
            "timeseries": {"series": args.series, "hours": args.hours,
                           "rows": series_rows or args.series * args.hours,
                           "bytes": os.path.getsize(series_csv)},
        },
        "flags": {"jobs": {j: job_flags[j] for j in jobs},
                  "runners": {"flink": cluster_info["flags"] if cluster_info else None,
                              "direct_mp2": list(DIRECT_MP2)}},
        "cluster": cluster_info,
        "results": {key: {"summary": summarize(recs), "samples": recs}
                    for key, recs in samples.items()},
        "definitions": {
            "wall_s": "the job command (python -m pipelines.<job>), launcher process "
                      "start to exit",
            "startup_s": "launcher start until the first finished shard file "
                         "(*.tfrecord.gz) appears under the output folder, polled "
                         f"every {POLL_S} s",
            "peak_mib": f"peak over samples every {MEMORY_EVERY_S} s of the summed RSS "
                        "(psutil) of the launcher and its descendants plus, for Flink, "
                        "the JobManager, TaskManagers and worker pool process trees; "
                        "shared pages count once per process",
            "peak_launcher_mib / peak_cluster_mib": "each part's own peak",
            "idle_cluster_mib": "the Flink processes' summed RSS just before the "
                                "launcher starts",
            "mib_by_role": "per role (launcher tree; each Flink role's trees): RSS "
                           "just before the launcher starts, at the total's peak, and "
                           "the role's own peak",
            "best": "the lowest value of the figure over the rounds",
            "foreign_cores": "busy CPU of the machine minus this script's, its "
                             "launchers' and the Flink processes', per second of wall "
                             "time",
        },
    }
    print_table(result)
    harness.write_result(args.out, args.setting or (
        f"images_{args.num_images}_series_{args.series}x{args.hours}"), result, CHART)
    print(f"wrote {args.out}")


CHART = harness.Chart("wall time by job/runner", lambda result: {
    name: entry["summary"]["wall_s"] for name, entry in result["results"].items()},
    unit="s (wall)")


if __name__ == "__main__":
    main()
