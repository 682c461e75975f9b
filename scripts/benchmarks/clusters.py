"""Cluster benchmark: both jobs on a Flink cluster of separate hosts against the default runner.

Measured side by side in one run, for each job and runner:

  flink        python -m pipelines.<job> with the flags ``scripts/flink.sh up`` prints
               (FlinkRunner through Beam's Flink job server, which the launcher starts;
               a JobManager and two TaskManagers of one slot each, each on a host of
               its own; --environment_type=PROCESS: each TaskManager starts SDK
               harnesses with Beam's boot binary, which installs the staged package
               into a venv first; --parallelism=2), the launcher's environment from
               ``scripts/flink.sh env`` added;
  local        the same command on the default runner with its default flags (no
               --direct_num_workers or --direct_running_mode: the FnApiRunner, one
               worker, in the launcher's process);
  direct_mp2   (only with --runners ...,direct_mp2) the default runner with
               --direct_num_workers=2 --direct_running_mode=multi_processing.

Inputs: --num_images web-size photos (scripts/benchmarks/sample_photos.py) for the
image job, with the flags scripts/benchmarks/image_job.py gives it (--image_size=224
--jpeg_quality=95 --overwrite: the job's defaults); --series hourly series x --hours
hours of the long-format CSV of scripts/benchmarks/series_job.py (default 370 x 8,760
= 3,241,200 rows, that benchmark's input) for the time-series job, with that script's
flags (--window_size=168 --shift=24 --horizon=24 --missing=interpolate). Both are
generated once into --work_dir and reused; --work_dir (default
.clusters/flink/shared/bench) must lie inside the cluster's shared folder, which
every host mounts at the same path, so that both runners read the same local files
and the Flink jobs accept them (--shared_folders). Outputs go under it too
(<work_dir>/clusters_out), each run's tf.Transform scratch folder beside its output,
not inside it. The storage host (the GCS server) is not used.

Per run (a fresh output folder each time):

  wall_s       the job command, from just before the launcher process is started
               to its exit (interpreter start, imports, job server, submission and
               the job itself);
  startup_s    the fixed cost, submit -> first shard: from the same start until a
               finished shard file (``*.tfrecord.gz``, pending or final: a pending
               name appears only once its shard is complete) first shows under the
               output folder, polled every 0.1 s; None if none was seen before the
               launcher exited;
  peak_mib     the peak, over samples every 0.2 s, of the summed RSS (psutil) of all
               the processes together: the launcher and all its descendants (Flink:
               the Java job server; direct_mp2: its worker processes) plus, for
               Flink, every process of every host but the storage host (the hosts'
               processes told apart by their network namespace, as ``ip netns pids
               tfetl-flink-<host>`` does: the JobManager, the TaskManagers, and the
               boot binaries, pip installs and SDK harnesses that come and go);
               peak_launcher_mib and peak_cluster_mib are the two parts' own peaks
               (not necessarily at the same instant), and idle_cluster_mib is the
               cluster's RSS just before the launcher starts; mib_by_role splits
               the figures by launcher, jobmanager, taskmanager and harness (the
               TaskManager hosts' other processes: boot binaries, pip, SDK
               harnesses), each idle, at the total's peak and at its own peak, and
               mib_by_host_at_peak by host. RSS counts pages shared between
               processes once per process, so the sum overstates the memory in
               use; it is what a per-process limit would see. The JVMs keep the
               heap a job made them grow, so a cluster's idle RSS (and with it the
               Flink peak) depends on what ran on it before: compare
               idle_cluster_mib across runs;
  harnesses_max, harnesses_started
               the most SDK harnesses alive at one sample, and how many were seen;
  harnesses_gone_s
               how long after the launcher's exit the last boot binary, pip and
               harness process of the hosts was gone (the runner keeps a harness
               --environment_cache_millis after its last use).

Before each run (untimed): the hosts' harnesses of an earlier run are waited for to
exit (up to --settle_s), the machine for a quiet spell (up to --max_wait s), and the
input is read into the page cache. Rounds (--rounds, default 3) alternate the
runners' order round by round; each figure's median, best (lowest) and worst round
are reported side by side, and, by medians, each runner ÷ local. Other processes'
CPU meanwhile (busy CPU minus this process tree's and the hosts' processes') is
recorded, and a run taken while it exceeded --max_foreign cores is retried (up to
--retries times). A job another user submits to the same cluster meanwhile counts
as ours: the number of jobs the cluster was running when each Flink run started is
recorded (``other_flink_jobs``).

Growth: each setting of the results file measured on another input size of the same
job (web_2000 and web_20000, say) gives, per runner and by medians, how wall time,
first shard and peak memory grew from one size to the other, the marginal seconds
per 1,000 inputs ((T_big - T_small) / (N_big - N_small)) and the fixed cost that
implies (T_small - N_small x marginal): ``growth`` in the later setting's entry.

The cluster: if ``scripts/flink.sh status`` lists no process, this script runs
``scripts/flink.sh up`` itself and ``scripts/flink.sh down`` at the end, whatever
happened (unless the cluster then runs a job or processes it did not start); if it
lists a JobManager and two TaskManagers, it uses that cluster (``up`` starts
nothing then, and only prints the flags) and leaves it running; a partial cluster is
refused. Every run must exit 0 and leave a manifest.json; otherwise the benchmark
stops with the run's stderr tail (logs in <work_dir>/clusters_logs).

Run it without ``nice``: the hosts' processes run at the priority of whoever
started the cluster, the launcher (and with it the whole local runner) at this
script's. Usage (each setting its own command; --quick: 40 photos, 20,000 rows, 1
round, no waiting for a quiet machine, results in the quick folder unless --out):

    python -m scripts.benchmarks clusters --jobs images --num_images 2000
    python -m scripts.benchmarks clusters --jobs images --num_images 20000 --rounds 1
    python -m scripts.benchmarks clusters --jobs timeseries --series 370 --hours 8760
    python -m scripts.benchmarks clusters --quick
"""

from __future__ import annotations

import argparse
import collections
import functools
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
from collections.abc import Callable
from typing import Any

import psutil

from scripts.benchmarks import harness
from scripts.benchmarks.sample_photos import describe, ensure_photos
from scripts.benchmarks.series_job import ensure_input

BENCHMARK = harness.Benchmark(
    name="clusters",
    measures="both jobs on the local Flink cluster (all hosts) against the default runner",
    quick=("--quick", "--out", "{quick_dir}/clusters.json"),
)


JOBS = {"images": "pipelines.images", "timeseries": "pipelines.timeseries"}
RUNNERS = ("flink", "local", "direct_mp2")
DEFAULT_RUNNERS = ("flink", "local")
# What the local runners add to the job's command: nothing, for the default runner's
# defaults.
LOCAL_FLAGS = {"local": (), "direct_mp2": ("--direct_num_workers=2",
                                           "--direct_running_mode=multi_processing")}
FLINK_SH = os.path.join(harness.REPO_ROOT, "scripts", "flink.sh")
# scripts/flink.sh's layout: the shared folder every host mounts, and each host's
# network namespace, "<bridge>-<host>" (ip netns).
SHARED = os.path.join(harness.REPO_ROOT, ".clusters", "flink", "shared")
NETNS_DIR = "/run/netns"
NETNS_PREFIX = "tfetl-flink-"
# The host whose processes are not counted: the storage host (a GCS server), which
# jobs with their files in the shared folder do not use.
UNUSED_HOSTS = ("storage",)
# The processes a running cluster must have, by scripts/flink.sh status's roles.
CLUSTER_ROLES = collections.Counter({"jobmanager": 1, "taskmanager": 2})
STABLE_ROLES = ("jobmanager", "taskmanager", "storage")
# Memory is reported by these groups of processes (MemorySampler).
MEMORY_ROLES = ("launcher", "jobmanager", "taskmanager", "harness")
POLL_S = 0.1
MEMORY_EVERY_S = 0.2
SETTLE_POLL_S = 0.5
# --quick: what the inputs and sampling become unless given explicitly.
QUICK = {"num_images": 40, "series": 10, "hours": 2000, "rounds": 1, "retries": 0,
         "max_wait": 0.0}
FULL = {"num_images": 2000, "series": 370, "hours": 8760, "rounds": 3, "retries": 3,
        "max_wait": 300.0}


# --- the hosts' processes --------------------------------------------------------------

def process_role(cmdline: str) -> str:
    """scripts/flink.sh's process_role: what runs on a host, told by its command line."""
    if "StandaloneSessionClusterEntrypoint" in cmdline:
        return "jobmanager"
    if "TaskManagerRunner" in cmdline:
        return "taskmanager"
    if "fake-gcs-server" in cmdline:
        return "storage"
    if "/opt/boot/container" in cmdline:
        return "boot"
    if "sdk_worker_main" in cmdline:
        return "harness"
    if "pip install" in cmdline:
        return "pip"
    return "other"


def memory_role(host: str, role: str) -> str:
    """The group a host's process counts in (MEMORY_ROLES, or "other")."""
    if role in ("jobmanager", "taskmanager"):
        return role
    return "harness" if host.startswith("taskmanager") else "other"


def host_namespaces() -> dict[tuple[int, int], str]:
    """Each host of the cluster by its network namespace's (device, inode): what
    ``ip netns pids`` compares /proc/PID/ns/net with."""
    hosts = {}
    try:
        names = os.listdir(NETNS_DIR)
    except OSError:
        return {}
    for name in names:
        if name.startswith(NETNS_PREFIX):
            try:
                st = os.stat(os.path.join(NETNS_DIR, name))
            except OSError:
                continue
            hosts[(st.st_dev, st.st_ino)] = name[len(NETNS_PREFIX):]
    return hosts


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _rss(pid: int) -> int:
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:  # Gone meanwhile.
        return 0


class Processes:
    """One scan of the process table: the launcher's tree, and each host's processes
    with their roles (``ROLE HOST PID``, as ``scripts/flink.sh status`` prints)."""

    def __init__(self, launcher: int | None, hosts: dict[tuple[int, int], str]) -> None:
        children: dict[int, list[int]] = collections.defaultdict(list)
        self.on_hosts: list[tuple[str, str, int]] = []
        host_pids = set()
        for proc in psutil.process_iter(["ppid"]):
            children[proc.info["ppid"]].append(proc.pid)
            if not hosts:
                continue
            try:
                st = os.stat(f"/proc/{proc.pid}/ns/net")
            except OSError:
                continue
            host = hosts.get((st.st_dev, st.st_ino))
            if host is not None:
                cmdline = _cmdline(proc.pid)
                if cmdline:  # Not a zombie.
                    self.on_hosts.append((process_role(cmdline), host, proc.pid))
                    host_pids.add(proc.pid)
        self.launcher: set[int] = set()
        stack = [] if launcher is None else [launcher]
        while stack:
            pid = stack.pop()
            if pid not in self.launcher and pid not in host_pids:
                self.launcher.add(pid)
                stack.extend(children.get(pid, ()))

    def roles(self) -> dict[str, list[int]]:
        """The hosts' pids by role."""
        roles: dict[str, list[int]] = collections.defaultdict(list)
        for role, _, pid in self.on_hosts:
            roles[role].append(pid)
        return dict(roles)

    def count(self, *roles: str) -> int:
        return sum(role in roles for role, _, _ in self.on_hosts)

    def memory(self) -> tuple[dict[str, int], dict[str, int], int]:
        """RSS by group (MEMORY_ROLES) and by host, the unused hosts left out, and
        how many processes were counted."""
        by_role = dict.fromkeys(MEMORY_ROLES, 0)
        by_role["launcher"] = sum(_rss(pid) for pid in self.launcher)
        by_host: dict[str, int] = {}
        counted = len(self.launcher)
        for role, host, pid in self.on_hosts:
            if host in UNUSED_HOSTS:
                continue
            rss = _rss(pid)
            group = memory_role(host, role)
            by_role[group] = by_role.get(group, 0) + rss
            by_host[host] = by_host.get(host, 0) + rss
            counted += 1
        return by_role, by_host, counted

    def cpu_seconds(self) -> float:
        """CPU seconds of the hosts' processes (every host), including the exited
        children they reaped (a boot binary reaps its pip and harness processes, a
        TaskManager its boot binaries)."""
        total = 0.0
        for _, _, pid in self.on_hosts:
            try:
                t = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system + t.children_user + t.children_system
        return total


WORKER_ROLES = ("boot", "pip", "harness")


def settle(hosts: dict[tuple[int, int], str], timeout_s: float) -> float | None:
    """Waits until no host runs a boot binary, pip or SDK harness; the seconds that
    took, or None if some still ran after ``timeout_s``."""
    start = time.perf_counter()
    while Processes(None, hosts).count(*WORKER_ROLES):
        if time.perf_counter() - start > timeout_s:
            return None
        time.sleep(SETTLE_POLL_S)
    return time.perf_counter() - start


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


def cluster_status() -> list[tuple[str, str, int]]:
    """``scripts/flink.sh status`` as (role, host, pid)."""
    found = []
    for line in flink_sh("status")[0].splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2].isdigit():
            found.append((parts[0], parts[1], int(parts[2])))
    return found


def stable_processes(status: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """The processes a cluster runs between jobs: JobManager, TaskManagers, storage."""
    return sorted(p for p in status if p[0] in STABLE_ROLES)


def _has_cluster(status: list[tuple[str, str, int]]) -> bool:
    counts = collections.Counter(role for role, _, _ in status)
    return all(counts[role] == n for role, n in CLUSTER_ROLES.items())


def _flag(flags: list[str], name: str) -> str | None:
    return next((f.split("=", 1)[1] for f in flags if f.startswith(f"--{name}=")), None)


class FlinkCluster:
    """The cluster the Flink runs use: the running one, or one this script starts
    (and stops in :meth:`close`)."""

    def __init__(self) -> None:
        before = cluster_status()
        if before and not _has_cluster(before):
            sys.exit(f"scripts/flink.sh status lists a partial cluster {before}; "
                     f"expected {dict(CLUSTER_ROLES)}. Not touching it: bring it up or "
                     f"down first.")
        self.started_here = not before
        started = time.monotonic()
        # A running cluster: `up` starts nothing and prints the flags again.
        self.up_output, _ = flink_sh("up")
        self.up_s = time.monotonic() - started
        self.flags = self.up_output.strip().splitlines()[-1].split()
        if not any(flag.startswith("--runner=") for flag in self.flags):
            self.close()
            sys.exit(f"scripts/flink.sh up printed no Beam flags:\n{self.up_output}")
        self.env = dict(line.split("=", 1) for line in flink_sh("env")[0].splitlines()
                        if "=" in line)
        self.processes = stable_processes(cluster_status())
        if not _has_cluster(self.processes):
            self.close()
            sys.exit(f"after scripts/flink.sh up: {self.processes}, expected "
                     f"{dict(CLUSTER_ROLES)}")
        self.hosts = host_namespaces()
        self.shared = os.path.realpath(_flag(self.flags, "shared_folders") or SHARED)
        self.rest = f"http://{_flag(self.flags, 'flink_master')}"

    @property
    def job_flags(self) -> list[str]:
        """The flags a job gets: ``up``'s, less its --tft_temp_dir (each run has its
        own, beside its output)."""
        return [f for f in self.flags if not f.startswith("--tft_temp_dir=")]

    def check_alive(self) -> None:
        """Exits if the cluster's processes changed (someone brought it down or
        restarted a process)."""
        now = stable_processes(cluster_status())
        if now != self.processes:
            sys.exit(f"the Flink cluster changed under the benchmark: {self.processes} -> "
                     f"{now}")

    def jobs(self) -> list[dict[str, Any]] | None:
        """The JobManager's jobs (None if unreachable)."""
        try:
            with urllib.request.urlopen(f"{self.rest}/jobs/overview", timeout=5) as r:
                return json.load(r)["jobs"]
        except (OSError, ValueError, KeyError):
            return None

    def running_jobs(self) -> list[str] | None:
        """The ids of the jobs the JobManager lists as not finished."""
        jobs = self.jobs()
        if jobs is None:
            return None
        return [job["jid"] for job in jobs
                if job.get("state") not in ("FINISHED", "FAILED", "CANCELED")]

    def cancel_jobs_but(self, keep: list[str] | None) -> None:
        """Cancels the running jobs not in ``keep`` (a killed launcher's job)."""
        for jid in set(self.running_jobs() or []) - set(keep or []):
            request = urllib.request.Request(f"{self.rest}/jobs/{jid}?mode=cancel",
                                             method="PATCH")
            try:
                urllib.request.urlopen(request, timeout=5).close()
                print(f"cancelled Flink job {jid}", flush=True)
            except OSError as e:
                print(f"could not cancel Flink job {jid}: {e}", flush=True)

    def describe(self) -> dict[str, Any]:
        idle = Processes(None, self.hosts)
        storage = sum(_rss(pid) for _, host, pid in idle.on_hosts if host in UNUSED_HOSTS)
        return {"started_by_this_script": self.started_here,
                "up_s": round(self.up_s, 1),
                "processes": [" ".join(map(str, p)) for p in self.processes],
                "hosts": sorted(self.hosts.values()), "flags": self.flags,
                "launcher_env": self.env, "shared_folder": self.shared,
                "not_counted": {"hosts": list(UNUSED_HOSTS),
                                "idle_mib": round(storage / harness.MIB, 1)}}

    def close(self) -> None:
        """``scripts/flink.sh down`` if this script started the cluster, it runs no
        job and only the processes this script started."""
        if not self.started_here:
            return
        now = stable_processes(cluster_status())
        running = self.running_jobs() if hasattr(self, "rest") else None
        if (hasattr(self, "processes") and now != self.processes) or running:
            print(f"not stopping the Flink cluster: it now runs {now} (started: "
                  f"{getattr(self, 'processes', None)}) and the jobs {running}", flush=True)
            return
        print(flink_sh("down")[0].rstrip(), flush=True)


# --- memory ----------------------------------------------------------------------------

class MemorySampler(threading.Thread):
    """Every ``MEMORY_EVERY_S``: the summed RSS of the launcher's tree and of the
    hosts' processes by group and host; keeps the peaks: of the total (and its parts
    then), of the launcher, of the cluster, and of each group; and counts the SDK
    harnesses."""

    def __init__(self, launcher: int, hosts: dict[tuple[int, int], str]) -> None:
        super().__init__(name="memory-sampler", daemon=True)
        self._launcher, self._hosts = launcher, hosts
        self._stop_event = threading.Event()
        self.samples = 0
        self.peak_total = self.peak_launcher = self.peak_cluster = 0
        self.peak_by_role: dict[str, int] = dict.fromkeys(MEMORY_ROLES, 0)
        self.at_peak_by_role: dict[str, int] = {}
        self.at_peak_by_host: dict[str, int] = {}
        self.peak_processes = self.max_processes = 0
        self.max_harnesses = 0
        self.harnesses: set[int] = set()

    def sample(self) -> None:
        processes = Processes(self._launcher, self._hosts)
        by_role, by_host, counted = processes.memory()
        launcher = by_role["launcher"]
        total = sum(by_role.values())
        self.samples += 1
        self.peak_launcher = max(self.peak_launcher, launcher)
        self.peak_cluster = max(self.peak_cluster, total - launcher)
        for role, rss in by_role.items():
            self.peak_by_role[role] = max(self.peak_by_role.get(role, 0), rss)
        self.max_processes = max(self.max_processes, counted)
        harnesses = processes.roles().get("harness", [])
        self.harnesses.update(harnesses)
        self.max_harnesses = max(self.max_harnesses, len(harnesses))
        if total > self.peak_total:
            self.peak_total, self.peak_processes = total, counted
            self.at_peak_by_role, self.at_peak_by_host = by_role, by_host

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


def _mib(value: int | None) -> float | None:
    return None if value is None else round(value / harness.MIB, 1)


def run_job(command: list[str], env: dict[str, str], output_dir: str, log_prefix: str,
            hosts: dict[tuple[int, int], str], timeout_s: float,
            on_kill: Callable[[], None] | None = None) -> dict[str, Any]:
    """Runs ``command`` (a job launcher) once and measures it; exits, with the
    stderr tail, unless it exits 0 with a manifest.json in ``output_dir``.
    ``hosts``: the cluster's, whose processes count (none for a local runner)."""
    stdout_path, stderr_path = log_prefix + ".stdout", log_prefix + ".stderr"
    idle_by_role, idle_by_host, _ = Processes(None, hosts).memory()
    del idle_by_role["launcher"]
    exited = threading.Event()
    end: list[float] = []
    with open(stdout_path, "w") as out, open(stderr_path, "w") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(command, cwd=harness.REPO_ROOT, env=env, stdout=out,
                                stderr=err, stdin=subprocess.DEVNULL)

    def wait() -> None:
        proc.wait()
        end.append(time.perf_counter())
        exited.set()

    waiter = threading.Thread(target=wait, name="launcher-wait", daemon=True)
    waiter.start()
    sampler = MemorySampler(proc.pid, hosts)
    sampler.start()
    startup = None

    def kill() -> None:
        kill_tree(proc.pid)
        exited.wait()
        if on_kill is not None:
            on_kill()

    try:
        while not exited.wait(POLL_S):
            if startup is None and first_shard(output_dir):
                startup = time.perf_counter() - start
            if time.perf_counter() - start > timeout_s:
                kill()
                sys.exit(f"{' '.join(command)} ran past {timeout_s:.0f} s; killed. "
                         f"stderr tail:\n{_tail(stderr_path, 6000)}")
    except BaseException:
        kill()
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
    roles = [r for r in MEMORY_ROLES if r == "launcher" or hosts] + sorted(
        set(sampler.peak_by_role) - set(MEMORY_ROLES))
    return {"wall_s": round(wall, 3),
            "startup_s": None if startup is None else round(startup, 3),
            "peak_mib": _mib(sampler.peak_total),
            "peak_launcher_mib": _mib(sampler.peak_launcher),
            "peak_cluster_mib": _mib(sampler.peak_cluster) if hosts else None,
            "idle_cluster_mib": _mib(sum(idle_by_role.values())) if hosts else None,
            "mib_by_role": {role: {"idle": _mib(idle_by_role.get(role)),
                                   "at_peak": _mib(sampler.at_peak_by_role.get(role)),
                                   "peak": _mib(sampler.peak_by_role.get(role))}
                            for role in roles},
            "mib_by_host_at_peak": {host: _mib(rss) for host, rss
                                    in sorted(sampler.at_peak_by_host.items())},
            "idle_mib_by_host": {host: _mib(rss) for host, rss in sorted(idle_by_host.items())},
            "harnesses_max": sampler.max_harnesses if hosts else None,
            "harnesses_started": len(sampler.harnesses) if hosts else None,
            "processes_at_peak": sampler.peak_processes,
            "max_processes": sampler.max_processes,
            "memory_samples": sampler.samples,
            "inputs": manifest["inputs"], **harness.output_summary(manifest)}


def measured_run(command: list[str], env: dict[str, str], output_dir: str, tft_dir: str,
                 log_prefix: str, inputs: list[str], cluster: FlinkCluster | None,
                 on_cluster: bool, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`run_job` on a quiet machine: retried (up to --retries) when other
    processes used more than --max_foreign cores meanwhile. ``on_cluster``: the
    command runs on ``cluster`` (whose processes count then)."""
    hosts = cluster.hosts if cluster is not None else {}
    attempts: list[float] = []
    for attempt in range(args.retries + 1):
        settled = settle(hosts, args.settle_s) if hosts else 0.0
        if settled is None:
            print(f"    (the hosts still run harnesses after {args.settle_s:.0f} s: "
                  f"measuring anyway)", flush=True)
        if args.max_wait:
            harness.wait_for_quiet(args.max_foreign, args.max_wait)
        harness.warm_page_cache(inputs)
        for folder in (output_dir, tft_dir):
            shutil.rmtree(folder, ignore_errors=True)
        running = None
        if on_cluster and cluster is not None:
            cluster.check_alive()
            running = cluster.running_jobs()
        busy0, own0 = harness.busy_cpu_seconds(), harness.own_cpu_seconds()
        cluster0 = Processes(None, hosts).cpu_seconds() if hosts else 0.0
        record = run_job(command, env, output_dir, f"{log_prefix}_try{attempt}",
                         hosts if on_cluster else {}, args.job_timeout,
                         functools.partial(cluster.cancel_jobs_but, running)
                         if on_cluster and cluster is not None else None)
        exited = time.perf_counter()
        cluster_cpu = (Processes(None, hosts).cpu_seconds() - cluster0) if hosts else 0.0
        own = harness.own_cpu_seconds() - own0
        busy = harness.busy_cpu_seconds() - busy0
        foreign = max(0.0, busy - own - cluster_cpu) / record["wall_s"]
        record.update(cpu_s=round(own + (cluster_cpu if on_cluster else 0.0), 2),
                      cluster_cpu_s=round(cluster_cpu, 2), foreign_cores=round(foreign, 3),
                      settle_before_s=None if settled is None else round(settled, 1))
        if on_cluster:
            record["other_flink_jobs"] = None if running is None else len(running)
            gone = settle(hosts, args.settle_s)
            record["harnesses_gone_s"] = (None if gone is None
                                          else round(time.perf_counter() - exited, 1))
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
# The figures compared between runners and between input sizes.
COMPARED = ("wall_s", "startup_s", "peak_mib")


DEFINITIONS = {
    "wall_s": "the job command (python -m pipelines.<job>), launcher process "
              "start to exit",
    "startup_s": "the fixed cost: launcher start until the first finished shard "
                 "file (*.tfrecord.gz) appears under the output folder, polled "
                 f"every {POLL_S} s",
    "peak_mib": f"peak over samples every {MEMORY_EVERY_S} s of the summed RSS "
                "(psutil) of the launcher and its descendants plus, for Flink, "
                "every process of every host (network namespace "
                f"{NETNS_PREFIX}<host>) but {', '.join(UNUSED_HOSTS)}; shared "
                "pages count once per process",
    "peak_launcher_mib / peak_cluster_mib": "each part's own peak",
    "idle_cluster_mib": "the hosts' processes' summed RSS just before the "
                        "launcher starts",
    "mib_by_role": "per group (launcher tree; jobmanager; taskmanager JVMs; "
                   "harness: the TaskManager hosts' boot binaries, pip and SDK "
                   "harnesses): RSS just before the launcher starts, at the "
                   "total's peak, and the group's own peak",
    "harnesses_started / harnesses_max": "SDK harness processes seen during the "
                                         "run / the most alive at one sample",
    "harnesses_gone_s": "launcher exit until no boot binary, pip or harness "
                        "process is left on the hosts",
    "ratios": "each runner ÷ local, by medians",
    "growth": "by medians, between this setting and another of the same job and "
              "runner on another input size: each figure at both sizes and its "
              "factor; marginal_s_per_1000 = (T_big - T_small) / (N_big - "
              "N_small) x 1000, fixed_s = T_small - N_small x marginal",
    "best / worst": "the lowest / highest value of the figure over the rounds",
    "foreign_cores": "busy CPU of the machine minus this script's, its "
                     "launchers' and the hosts' processes', per second of wall "
                     "time",
}


def summarize(samples: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Median, best (lowest) and worst round of each figure."""
    result: dict[str, dict[str, float | None]] = {}
    for figure in FIGURES:
        values = [s[figure] for s in samples if s.get(figure) is not None]
        spread = harness.spread(values, higher_is_better=False) if values else None
        result[figure] = {key: (round(spread[key], 3) if spread else None)
                          for key in ("median", "best", "worst")}
    return result


def _median(entry: dict[str, Any], figure: str) -> float | None:
    return entry["summary"].get(figure, {}).get("median")


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)


def ratios(results: dict[str, Any]) -> dict[str, dict[str, dict[str, float | None]]]:
    """Per job, each runner ÷ local, by medians: ``{job: {"flink_over_local":
    {figure: ratio}}}``."""
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for key, entry in results.items():
        job, runner = key.split("/")
        local = results.get(f"{job}/local")
        if runner == "local" or local is None:
            continue
        out.setdefault(job, {})[f"{runner}_over_local"] = {
            figure: _ratio(_median(entry, figure), _median(local, figure))
            for figure in COMPARED}
    return out


def input_size(result: dict[str, Any], job: str) -> int | None:
    """What a setting's job ran on: photos for the image job, rows for the other."""
    entry = (result.get("input") or {}).get(job) or {}
    return entry.get("photos" if job == "images" else "rows")


def growth(setting: str, result: dict[str, Any], settings: dict[str, dict[str, Any]]
           ) -> dict[str, Any]:
    """How each job/runner's medians grew between this result and every other
    setting of the results file with the same job and runner on another input size:
    ``{other setting: {job/runner: {...}}}``, smaller size first."""
    found: dict[str, Any] = {}
    for other_name, other in settings.items():
        # Only settings this version measured (they have "ratios"): earlier ones ran
        # on another kind of cluster.
        if other_name == setting or "ratios" not in other:
            continue
        for key, entry in result["results"].items():
            job = key.split("/")[0]
            other_entry = (other.get("results") or {}).get(key)
            size, other_size = input_size(result, job), input_size(other, job)
            if other_entry is None or not size or not other_size or size == other_size:
                continue
            (small, n_small), (big, n_big) = sorted(
                [(other_entry, other_size), (entry, size)], key=lambda pair: pair[1])
            figures: dict[str, Any] = {"sizes": [n_small, n_big],
                                       "size_factor": round(n_big / n_small, 3)}
            for figure in COMPARED:
                a, b = _median(small, figure), _median(big, figure)
                figures[figure] = [a, b]
                figures[f"{figure}_factor"] = _ratio(b, a)
            a, b = figures["wall_s"]
            if a is not None and b is not None:
                marginal = (b - a) / (n_big - n_small)
                figures["marginal_s_per_1000"] = round(marginal * 1000, 3)
                figures["fixed_s"] = round(a - n_small * marginal, 2)
            found.setdefault(other_name, {"date": other.get("date"),
                                          "commit": (other.get("code") or {}).get("commit"),
                                          "cpu_model": (other.get("machine") or {}).get(
                                              "cpu_model")})[key] = figures
    return found


def _cell(value: dict[str, float | None] | None, spec: str) -> str:
    def fmt(v: float | None) -> str:
        return "n/a" if v is None else format(v, spec)

    if value is None:
        return "n/a"
    return f"{fmt(value['median'])} ({fmt(value['best'])}-{fmt(value.get('worst'))})"


def print_table(result: dict[str, Any]) -> None:
    sizes = [f"{result['input']['images']['photos']:,} web photos" if "images" in
             result["input"] else "",
             f"{result['input']['timeseries']['rows']:,} series rows" if "timeseries" in
             result["input"] else ""]
    print(f"\n{', '.join(filter(None, sizes))}, {result['rounds']} round(s); "
          f"median (best-worst round)")
    header = (f"{'job':<11}{'runner':<11}{'wall s':>20}{'first shard s':>20}"
              f"{'peak MiB':>22}{'launcher MiB':>22}{'cluster MiB':>22}{'idle MiB':>10}")
    print(header)
    print("-" * len(header))
    for key, entry in result["results"].items():
        job, runner = key.split("/")
        s = entry["summary"]
        idle = s["idle_cluster_mib"]["median"]
        print(f"{job:<11}{runner:<11}{_cell(s['wall_s'], '.1f'):>20}"
              f"{_cell(s['startup_s'], '.1f'):>20}{_cell(s['peak_mib'], '.0f'):>22}"
              f"{_cell(s['peak_launcher_mib'], '.0f'):>22}"
              f"{_cell(s['peak_cluster_mib'], '.0f'):>22}"
              f"{'—' if idle is None else format(idle, '.0f'):>10}")
    for key, entry in result["results"].items():
        samples = entry["samples"]
        roles = samples[0]["mib_by_role"]
        if len(roles) > 1:
            def median_of(role: str, when: str, samples: list = samples) -> float:
                return statistics.median(s["mib_by_role"][role][when] or 0 for s in samples)

            parts = ", ".join(f"{role} {median_of(role, 'at_peak'):.0f} (idle "
                              f"{median_of(role, 'idle'):.0f}, own peak "
                              f"{median_of(role, 'peak'):.0f})" for role in roles)
            print(f"{key}: MiB by role at the peak (medians): {parts}")
            harnesses = statistics.median(s["harnesses_started"] for s in samples)
            gone = [s["harnesses_gone_s"] for s in samples if s.get("harnesses_gone_s")
                    is not None]
            print(f"{key}: SDK harnesses started {harnesses:.0f}, at most "
                  f"{max(s['harnesses_max'] for s in samples)} at once; the last gone "
                  f"{statistics.median(gone) if gone else float('nan'):.0f} s after the "
                  f"launcher's exit (medians)")
    for job, pairs in result["ratios"].items():
        for name, figures in pairs.items():
            parts = ", ".join(f"{figure} {'n/a' if v is None else format(v, '.2f') + ' x'}"
                              for figure, v in figures.items())
            print(f"{job}: {name.replace('_over_', ' ÷ ')}: {parts} (medians)")
    for other, by_key in result.get("growth", {}).items():
        for key, g in by_key.items():
            if "/" not in key:
                continue
            lo, hi = g["sizes"]
            wall_a, wall_b = g["wall_s"]
            print(f"{key}: {lo:,} -> {hi:,} ({other}): wall {wall_a:.1f} -> {wall_b:.1f} s "
                  f"({g['wall_s_factor']} x), first shard {g['startup_s_factor']} x, peak "
                  f"{g['peak_mib_factor']} x; {g.get('marginal_s_per_1000', float('nan')):.2f}"
                  f" s per 1,000 more, fixed {g.get('fixed_s', float('nan')):.1f} s")


def default_setting(jobs: list[str], num_images: int, rows: int) -> str:
    """``web_<photos>``, ``series_<thousands of rows, to 10 k>k``, or both joined."""
    parts = []
    if "images" in jobs:
        parts.append(f"web_{num_images}")
    if "timeseries" in jobs:
        parts.append(f"series_{round(rows / 1e4) * 10}k")
    return "_".join(parts)


# --- main ------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default=os.path.join(SHARED, "bench"),
                        help="Inputs are generated (and reused) here; outputs and logs "
                             "go under it. Inside the cluster's shared folder when "
                             "Flink runs. Default: %(default)s.")
    harness.add_result_flags(parser, "clusters", "web_<num_images> and/or "
                             "series_<rows/1000>k, by --jobs")
    parser.add_argument("--drop_setting", action="append",
                        help="Remove this entry of the results file when writing this "
                             "run's (one measured on an earlier kind of cluster, say); "
                             "repeatable.")
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
    parser.add_argument("--runners", default=",".join(DEFAULT_RUNNERS),
                        help=f"Comma-separated, of {','.join(RUNNERS)} (default "
                             f"%(default)s).")
    harness.add_sampling_flags(parser, rounds=FULL["rounds"])
    parser.add_argument("--max_wait", type=float, default=None,
                        help=f"Seconds to wait for a quiet machine before each run "
                             f"(default {FULL['max_wait']:.0f}; --quick 0).")
    parser.add_argument("--settle_s", type=float, default=240,
                        help="Before each run, wait up to this long for the hosts' "
                             "harnesses of an earlier run to exit.")
    parser.add_argument("--job_timeout", type=float, default=3600,
                        help="Kill a run (and fail) after this many seconds.")
    # None: the --quick or full default (QUICK, FULL).
    parser.set_defaults(rounds=None, retries=None)
    args = parser.parse_args()
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.quick and args.out == harness.result_path("clusters"):  # Not a result: not in the docs.
        args.out = os.path.join(harness.QUICK_DIR, "clusters.json")
    jobs = [j for j in args.jobs.split(",") if j]
    runners = [r for r in args.runners.split(",") if r]
    if set(jobs) - set(JOBS) or set(runners) - set(RUNNERS) or not jobs or not runners:
        parser.error(f"--jobs of {list(JOBS)}, --runners of {list(RUNNERS)}")
    args.work_dir = os.path.realpath(args.work_dir)
    if "flink" in runners and os.path.commonpath([args.work_dir, SHARED]) != SHARED:
        parser.error(f"--work_dir must lie inside the cluster's shared folder {SHARED}: "
                     f"the Flink jobs read and write there")

    os.makedirs(args.work_dir, exist_ok=True)
    job_inputs: dict[str, tuple[str, list[str]]] = {}
    if "images" in jobs:
        photos = ensure_photos(args.work_dir, args.num_images, verbose=True)
        job_inputs["images"] = (photos, sorted(glob.glob(os.path.join(photos, "*", "*.jpg"))))
    if "timeseries" in jobs:
        series_csv = ensure_input(args.work_dir, args.series, args.hours)
        job_inputs["timeseries"] = (series_csv, [series_csv])
    out_root = os.path.join(args.work_dir, "clusters_out")
    logs = os.path.join(args.work_dir, "clusters_logs")
    os.makedirs(logs, exist_ok=True)
    job_flags = {
        "images": [f"--image_size={args.image_size}", f"--jpeg_quality={args.jpeg_quality}",
                   "--overwrite"],
        "timeseries": [f"--window_size={args.window_size}", f"--shift={args.shift}",
                       f"--horizon={args.horizon}", "--missing=interpolate", "--overwrite"],
    }

    cluster = FlinkCluster() if "flink" in runners else None
    samples: dict[str, list[dict[str, Any]]] = {f"{j}/{r}": [] for j in jobs for r in runners}
    try:
        if cluster is not None:
            how = "started by this script" if cluster.started_here else "already running"
            print(f"Flink cluster {how} ({cluster.up_s:.0f} s): {cluster.processes}\nflags: "
                  f"{' '.join(cluster.flags)}", flush=True)
            if os.path.commonpath([args.work_dir, cluster.shared]) != cluster.shared:
                sys.exit(f"--work_dir {args.work_dir} is not inside the cluster's "
                         f"--shared_folders {cluster.shared}")
        runner_flags = {"flink": cluster.job_flags if cluster else [],
                        **{name: list(flags) for name, flags in LOCAL_FLAGS.items()}}
        local_env = harness.job_env()
        runner_env = {"flink": {**local_env, **(cluster.env if cluster else {})}}
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
                    record = measured_run(command, runner_env.get(runner, local_env),
                                          output_dir, tft_dir,
                                          os.path.join(logs, f"{job}_{runner}_r{r}"),
                                          files, cluster, runner == "flink", args)
                    samples[key].append(record)
                    startup = ("n/a" if record["startup_s"] is None
                               else f"{record['startup_s']:.1f} s")
                    on_cluster = ("" if record["peak_cluster_mib"] is None else
                                  f", cluster {record['peak_cluster_mib']:.0f}, idle "
                                  f"{record['idle_cluster_mib']:.0f}; harnesses "
                                  f"{record['harnesses_started']}, gone "
                                  f"{record['harnesses_gone_s']} s after")
                    print(f"round {r + 1}/{args.rounds} {job:<10} {runner:<10} wall "
                          f"{record['wall_s']:7.1f} s  first shard {startup:>8}  peak "
                          f"{record['peak_mib']:7.0f} MiB (launcher "
                          f"{record['peak_launcher_mib']:.0f}{on_cluster})  (other "
                          f"processes: {record['foreign_cores']:.2f} cores)", flush=True)
        cluster_info = cluster.describe() if cluster is not None else None
    finally:
        if cluster is not None:
            cluster.close()
        shutil.rmtree(out_root, ignore_errors=True)

    inputs: dict[str, Any] = {}
    if "images" in jobs:
        photos, files = job_inputs["images"]
        inputs["images"] = {"photos": len(files), "tree": describe(photos),
                            "path": photos}
    if "timeseries" in jobs:
        series_csv = job_inputs["timeseries"][0]
        rows = samples["timeseries/" + runners[0]][0].get("inputs")
        inputs["timeseries"] = {"series": args.series, "hours": args.hours,
                                "rows": rows or args.series * args.hours,
                                "bytes": os.path.getsize(series_csv), "path": series_csv}
    results = {key: {"summary": summarize(recs), "samples": recs}
               for key, recs in samples.items()}
    setting = args.setting or default_setting(jobs, args.num_images,
                                              args.series * args.hours)
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": harness.machine(),
        "code": harness.code_version(),
        "rounds": args.rounds,
        "quick": args.quick,
        "max_foreign_cores": args.max_foreign,
        "input": inputs,
        "flags": {"jobs": {j: job_flags[j] for j in jobs},
                  "runners": {r: runner_flags[r] for r in runners}},
        "cluster": cluster_info,
        "results": results,
        "ratios": ratios(results),
        "definitions": DEFINITIONS,
    }
    settings = harness.read_settings(args.out)
    dropped = [name for name in args.drop_setting or [] if name in settings]
    if dropped:  # Before write_result, which keeps the file's other settings.
        harness.write_json(args.out, {"benchmark": "clusters", "settings": {
            name: entry for name, entry in settings.items() if name not in dropped}})
        print(f"dropped the settings {dropped} from {args.out}")
    result["growth"] = growth(setting, result, {
        name: entry for name, entry in settings.items() if name not in dropped})
    print_table(result)
    harness.write_result(args.out, setting, result, CHART)
    print(f"wrote {args.out} (setting {setting})")


def chart_panel(setting: str, result: dict[str, Any]) -> harness.Panel:
    """A setting's wall times by job/runner, each runner ÷ local in the title."""
    figures = {name: entry["summary"]["wall_s"] for name, entry in result["results"].items()}
    title = harness.setting_title(setting, result, "wall time by job/runner")
    quotients: dict[str, list[str]] = {}
    for job, pairs in (result.get("ratios") or {}).items():
        for name, ratio in pairs.items():
            if ratio.get("wall_s") is not None:
                quotients.setdefault(name.split("_over_")[0], []).append(
                    f"{job} {ratio['wall_s']:.2f}x")
    for runner, parts in quotients.items():
        title += f"\n{runner} ÷ local, wall, medians: {', '.join(parts)}"
    return harness.Panel(title, list(figures), [f["median"] for f in figures.values()],
                         [f["best"] for f in figures.values()])


CHART = harness.Chart(unit="s (wall)", panel=chart_panel)


if __name__ == "__main__":
    main()
