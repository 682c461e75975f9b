#!/usr/bin/env bash
# A local Flink cluster for the jobs: scripts/flink.sh up|down|status
#
#   up      fetches what is missing into .clusters/cache/ (Beam's Flink job server
#           with mvn, the Flink distribution from the package index; a second `up`
#           downloads nothing), then starts what is not running: a JobManager and
#           two TaskManagers (one slot each) on 127.0.0.1, and a Beam worker pool
#           (pipelines/worker_pool.py) whose venv holds this project's sdist. Its
#           last line is the Beam flags to add to either job.
#   status  one line per running process: "jobmanager PID", "taskmanager PID", ...
#   down    stops what `up` started, by pid, and nothing else.
#
# Versions: Flink 1.19 with Beam 2.62's Flink runner, the newest Beam Flink runner
# whose jars (and their dependencies) Maven Central serves here; the Python SDK is
# the project's (2.77). docs/RUNNING_AT_SCALE.md says what that means.
# Ports (override by environment): FLINK_REST_PORT (8081), FLINK_RPC_PORT (6123),
# WORKER_POOL_PORT (50000). Workers inherit this shell's environment (e.g.
# STORAGE_EMULATOR_HOST for a local GCS server).
set -euo pipefail
source "$(dirname "$0")/clusters/common.sh"

FLINK_VERSION=1.19.3
FLINK_MINOR=1.19
BEAM_JOB_SERVER_VERSION=2.62.0
rest_port="${FLINK_REST_PORT:-8081}"
rpc_port="${FLINK_RPC_PORT:-6123}"
pool_port="${WORKER_POOL_PORT:-50000}"
taskmanagers=2
run="$clusters/flink"
flink_home="$cache/flink-$FLINK_VERSION"
job_server="$cache/beam-flink-$FLINK_MINOR-job-server-$BEAM_JOB_SERVER_VERSION"

# The Flink distribution: bin/ and conf/ from the apache-flink wheel, lib/, opt/
# and plugins/ from the apache-flink-libraries sdist (pyflink's own layout, which
# pip would assemble on install; apache-flink pins an old apache-beam, so it is
# unpacked here, never installed).
fetch_flink() {
  [ -x "$flink_home/bin/jobmanager.sh" ] && return 0
  local wheels="$cache/wheels/flink-$FLINK_VERSION"
  echo "Fetching Flink $FLINK_VERSION from the package index" >&2
  ls "$wheels"/apache_flink-*.whl >/dev/null 2>&1 || download_pip "$wheels" \
    "apache-flink==$FLINK_VERSION" --only-binary=:all: --python-version 3.11 \
    --platform manylinux2014_x86_64
  ls "$wheels"/apache-flink-libraries-*.tar.gz "$wheels"/apache_flink_libraries-*.tar.gz \
    >/dev/null 2>&1 || download_pip "$wheels" "apache-flink-libraries==$FLINK_VERSION" \
    --no-binary=:all:
  rm -rf "$flink_home.partial" && mkdir -p "$flink_home.partial"
  "$python_bin" - "$wheels" "$flink_home.partial" <<'PY'
import glob, os, shutil, sys, tarfile, zipfile
wheels, home = sys.argv[1:]
with zipfile.ZipFile(glob.glob(os.path.join(wheels, "apache_flink-*.whl"))[0]) as whl:
    for name in whl.namelist():
        for part in ("bin", "conf"):
            prefix = f"pyflink/{part}/"
            if name.startswith(prefix) and not name.endswith("/"):
                target = os.path.join(home, part, name[len(prefix):])
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with whl.open(name) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
sdist = glob.glob(os.path.join(wheels, "apache*flink*libraries-*.tar.gz"))[0]
with tarfile.open(sdist) as tar:
    for member in tar.getmembers():
        parts = member.name.split("/")
        if len(parts) > 3 and parts[1] == "deps" and parts[2] in ("bin", "lib", "opt", "plugins") \
                and member.isfile():
            target = os.path.join(home, *parts[2:])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with tar.extractfile(member) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
for script in glob.glob(os.path.join(home, "bin", "*.sh")) + [os.path.join(home, "bin", "flink")]:
    os.chmod(script, 0o755)
PY
  [ -f "$flink_home.partial/lib/flink-dist-$FLINK_VERSION.jar" ] \
    || die "the Flink $FLINK_VERSION packages hold no lib/flink-dist-$FLINK_VERSION.jar"
  rm -rf "$flink_home" && mv "$flink_home.partial" "$flink_home"
}

# The cluster's configuration: everything on 127.0.0.1, sized for 2 cores and 24 GB
# (a 1 GB JobManager; two 2 GB TaskManagers of one slot each: the Python harnesses,
# outside them, hold the data), and the restart strategy.
write_conf() {
  mkdir -p "$run/conf"
  cp "$flink_home"/conf/log4j*.properties "$flink_home"/conf/logback*.xml "$run/conf/"
  local java_opts
  java_opts="$(sed -n 's/^ *all: //p' "$flink_home/conf/config.yaml" | head -1)"
  cat >"$run/conf/config.yaml" <<YAML
env:
  java:
    opts:
      all: $java_opts
jobmanager:
  bind-host: 127.0.0.1
  rpc:
    address: 127.0.0.1
    port: $rpc_port
  memory:
    process:
      size: 1024m
  execution:
    failover-strategy: region
taskmanager:
  bind-host: 127.0.0.1
  host: 127.0.0.1
  numberOfTaskSlots: 1
  memory:
    process:
      size: 2048m
rest:
  address: 127.0.0.1
  bind-address: 127.0.0.1
  port: $rest_port
parallelism:
  default: 2
restart-strategy:
  type: fixed-delay
  fixed-delay:
    attempts: 3
    delay: 10 s
slot:
  request:
    timeout: 300000
YAML
}

flink_process() {  # flink_process ROLE_SCRIPT PIDFILE LOG
  FLINK_CONF_DIR="$run/conf" FLINK_LOG_DIR="$run/logs" \
    start_process "$2" "$3" "$flink_home/bin/$1" start-foreground
}

registered_taskmanagers() {
  "$python_bin" - "$rest_port" <<'PY' 2>/dev/null || echo 0
import json, sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/overview", timeout=2) as r:
    print(json.load(r)["taskmanagers"])
PY
}

up() {
  fetch_job_server "$job_server" "beam-runners-flink-$FLINK_MINOR" "$BEAM_JOB_SERVER_VERSION" \
    org.apache.beam.runners.flink.FlinkJobServerDriver
  fetch_flink
  mkdir -p "$run/pids" "$run/logs"
  cluster_status "$run" >/dev/null  # drops the pid files of dead processes
  write_conf
  if [ ! -f "$run/pids/jobmanager-1" ]; then
    flink_process jobmanager.sh "$run/pids/jobmanager-1" "$run/logs/jobmanager.out"
    echo "started jobmanager $(pid_of "$run/pids/jobmanager-1")" >&2
  fi
  wait_for_port "$rest_port" 90 "Flink's JobManager"
  local n
  for n in $(seq 1 "$taskmanagers"); do
    if [ ! -f "$run/pids/taskmanager-$n" ]; then
      flink_process taskmanager.sh "$run/pids/taskmanager-$n" "$run/logs/taskmanager-$n.out"
      echo "started taskmanager $(pid_of "$run/pids/taskmanager-$n")" >&2
    fi
  done
  finish_up "$run" "$pool_port" "$taskmanagers" registered_taskmanagers \
    "TaskManagers (with the JobManager)"
  echo "--runner=FlinkRunner --flink_master=127.0.0.1:$rest_port --flink_version=$FLINK_MINOR --flink_job_server_jar=$job_server/job-server.jar --environment_type=EXTERNAL --environment_config=127.0.0.1:$pool_port --parallelism=$taskmanagers"
}

case "${1:-}" in
  up) up ;;
  status) cluster_status "$run" ;;
  down) cluster_down "$run" ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
