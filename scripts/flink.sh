#!/usr/bin/env bash
# A Flink cluster of separate hosts on this machine: scripts/flink.sh up|down|status|env
#
#   up      fetches what is missing into .clusters/cache/ (Beam's Flink job server
#           with mvn, the Flink distribution from the package index, Beam's Python
#           boot binary with go, the worker image from the package index; a second
#           `up` downloads nothing), then starts what is not running, each on a host
#           of its own: a JobManager, two TaskManagers (one slot each) and the storage
#           host (a GCS server). A host is a network namespace on a bridge this
#           script creates, with a filesystem view of its own: the launcher's work
#           tree, .venv and /tmp are not there; one folder, .clusters/flink/shared,
#           is mounted into every host at the same path (tf.Transform's temp files
#           and the job's staged artifacts, as users mount NFS or Filestore). Each
#           TaskManager starts Python SDK harnesses with Beam's boot binary
#           (--environment_type=PROCESS), which installs the job's staged package
#           into a venv over the host's worker image. Root only (ip netns, mount).
#           Its last line is the Beam flags to add to either job.
#   status  one line per process of each host: "ROLE HOST PID" (jobmanager,
#           taskmanager, boot, harness, storage, ...).
#   env     the environment a launcher's job and checks need: STORAGE_EMULATOR_HOST=URL
#           (the storage host as this machine reaches it) and no credentials to find.
#   down    stops every process of every host and removes the hosts and the bridge.
#
# Versions: Flink 1.19 with Beam 2.62's Flink runner, the newest Beam Flink runner
# whose jars (and their dependencies) Maven Central serves here; the Python SDK and
# the boot binary are the project's (2.77). docs/RUNNING_AT_SCALE.md says what that
# means. Addresses: FLINK_SUBNET (10.231.1): the launcher is .1, the JobManager .2,
# the TaskManagers .3 and .4, the storage host .10.
set -euo pipefail
source "$(dirname "$0")/clusters/common.sh"

FLINK_VERSION=1.19.3
FLINK_MINOR=1.19
BEAM_JOB_SERVER_VERSION=2.62.0
rest_port=8081
rpc_port=6123
blob_port=6124
taskmanagers=2
subnet="${FLINK_SUBNET:-10.231.1}"
bridge=tfetl-flink
jobmanager_address="$subnet.2"
run="$clusters/flink"
shared="$run/shared"
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

# What the hosts run: the Flink distribution with Beam's runner jars in lib/ (hard
# links; Flink's own jars and slf4j come from the distribution). Loaded by Flink's
# parent class loader (classloader.resolve-order below), Beam's classes
# outlive a job's stages: the runner then keeps each TaskManager's SDK harness for
# --environment_cache_millis between stages instead of booting one per stage, which
# it does for classes only the job's own jar brings.
cluster_flink() {
  local home="$cache/flink-$FLINK_VERSION-beam-$BEAM_JOB_SERVER_VERSION" jar
  if [ ! -f "$home/ready" ]; then
    rm -rf "$home" && cp -al "$flink_home" "$home"
    for jar in "$job_server"/lib/*.jar; do
      case "$(basename "$jar")" in flink-*|slf4j-*) ;; *) ln "$jar" "$home/lib/" ;; esac
    done
    touch "$home/ready"
  fi
  echo "$home"
}

# Each host's configuration (its disk's conf/): the JobManager at $jobmanager_address,
# a TaskManager at its own address, sized for 2 cores and 24 GB (a 1 GB JobManager,
# 2 GB TaskManagers of one slot each: the Python harnesses beside them hold the
# data), and no restarts: a restarted job re-runs tf.Transform's analysis, and a
# harness that outlived the failure still holds the first attempt's transform graph
# (tf.Transform's _RunMetaGraphDoFn asserts its saved model is the one it loaded),
# so every restart fails on that assertion; without one the job fails on what went
# wrong, in one line, and the same command resumes (docs/RUNNING_AT_SCALE.md).
write_conf() {  # write_conf HOST ADDRESS
  local conf="$run/hosts/$1/conf" java_opts
  mkdir -p "$conf"
  cp "$flink_home"/conf/log4j*.properties "$flink_home"/conf/logback*.xml "$conf/"
  java_opts="$(sed -n 's/^ *all: //p' "$flink_home/conf/config.yaml" | head -1)"
  cat >"$conf/config.yaml" <<YAML
classloader:
  resolve-order: parent-first
env:
  java:
    opts:
      all: $java_opts
jobmanager:
  bind-host: 0.0.0.0
  rpc:
    address: $jobmanager_address
    port: $rpc_port
  memory:
    process:
      size: 1024m
  execution:
    failover-strategy: region
taskmanager:
  bind-host: 0.0.0.0
  host: $2
  numberOfTaskSlots: 1
  slot:
    timeout: 60 s
  memory:
    process:
      size: 2048m
blob:
  server:
    port: $blob_port
rest:
  address: $jobmanager_address
  bind-address: 0.0.0.0
  port: $rest_port
parallelism:
  default: $taskmanagers
restart-strategy:
  type: none
slot:
  request:
    timeout: 300000
  idle:
    timeout: 60000
YAML
}

# What runs on a host is told by its command line.
process_role() {
  case "$1" in
    *StandaloneSessionClusterEntrypoint*) echo jobmanager ;;
    *TaskManagerRunner*) echo taskmanager ;;
    *fake-gcs-server*) echo storage ;;
    */opt/boot/container*) echo boot ;;
    *sdk_worker_main*) echo harness ;;
    *pip\ install*) echo pip ;;
    *) echo other ;;
  esac
}

cluster_hosts() {  # "ADDRESS NAME" lines for /etc/hosts
  local n
  echo "$subnet.1 launcher"
  echo "$jobmanager_address jobmanager"
  for n in $(seq 1 "$taskmanagers"); do echo "$subnet.$((n + 2)) taskmanager$n"; done
  echo "$(storage_address) storage"
}

has_role() {  # has_role ROLE HOST (not grep -q: under pipefail its early exit fails the pipe)
  hosts_status | grep "^$1 $2 " >/dev/null
}

registered_taskmanagers() {
  "$python_bin" - "$jobmanager_address:$rest_port" <<'PY' 2>/dev/null || echo 0
import json, sys, urllib.request
with urllib.request.urlopen(f"http://{sys.argv[1]}/overview", timeout=2) as r:
    print(json.load(r)["taskmanagers"])
PY
}

up() {
  fetch_job_server "$job_server" "beam-runners-flink-$FLINK_MINOR" "$BEAM_JOB_SERVER_VERSION" \
    org.apache.beam.runners.flink.FlinkJobServerDriver
  fetch_flink
  local hosts_flink
  hosts_flink="$(cluster_flink)"
  boot_binary="$(fetch_boot_binary)"
  worker_image="$(build_worker_image)"
  set_host_environment "FLINK_CONF_DIR=/opt/conf" "FLINK_LOG_DIR=/opt/logs"
  mkdir -p "$shared"
  network_up
  has_role storage storage || start_storage
  host_add jobmanager 2
  if ! has_role jobmanager jobmanager; then
    write_conf jobmanager "$jobmanager_address"
    host_dist="$hosts_flink" host_start jobmanager "$run/hosts/jobmanager/logs/jobmanager.out" \
      "$shared" /opt/dist/bin/jobmanager.sh start-foreground
    echo "started jobmanager at $jobmanager_address" >&2
  fi
  wait_for_address "$jobmanager_address" "$rest_port" 90 "Flink's JobManager"
  local n
  for n in $(seq 1 "$taskmanagers"); do
    host_add "taskmanager$n" $((n + 2))
    if ! has_role taskmanager "taskmanager$n"; then
      write_conf "taskmanager$n" "$subnet.$((n + 2))"
      host_dist="$hosts_flink" host_start "taskmanager$n" \
        "$run/hosts/taskmanager$n/logs/taskmanager.out" "$shared" \
        /opt/dist/bin/taskmanager.sh start-foreground
      echo "started taskmanager$n at $subnet.$((n + 2))" >&2
    fi
  done
  wait_for_count registered_taskmanagers "$taskmanagers" 120 "$taskmanagers TaskManagers"
  echo "--runner=FlinkRunner --flink_master=$jobmanager_address:$rest_port --flink_version=$FLINK_MINOR --flink_job_server_jar=$job_server/job-server.jar --environment_type=PROCESS --environment_options=process_command=/opt/boot/container --environment_cache_millis=60000 --parallelism=$taskmanagers --artifacts_dir=$shared/artifacts --setup_file=$repo/setup.py --tft_temp_dir=$shared/tft --shared_folders=$shared"
}

case "${1:-}" in
  up) up ;;
  status) hosts_status ;;
  env) launcher_environment ;;
  down) hosts_down; rm -rf "$run/hosts" ;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
