#!/usr/bin/env bash
# A local Spark cluster for the jobs: scripts/spark.sh up|down|status
#
#   up      fetches what is missing into .clusters/cache/ (Beam's Spark job server
#           with mvn, Spark itself from the pyspark sdist on the package index; a
#           second `up` downloads nothing), then starts what is not running: a
#           standalone master and two workers (one core each) on 127.0.0.1, and a
#           Beam worker pool (pipelines/worker_pool.py) whose venv holds this
#           project's sdist. Its last line is the Beam flags to add to either job.
#   status  one line per running process: "master PID", "worker PID", ...
#   down    stops what `up` started, by pid, and nothing else.
#
# Versions: Spark 3.5.0 (Scala 2.12) with Beam 2.62's Spark 3 runner, the newest Beam
# Spark runner whose jars (and their dependencies) Maven Central serves here. That
# runner is compiled against Spark 3.2.2 (its pom's "provided" dependencies) and
# tested by Beam against 3.1.1 to 3.5.0; 3.5.0 is the newest of those, and Java 17
# needs Spark 3.3 or later. The Python SDK is the project's (2.77).
# Ports (override by environment): SPARK_MASTER_PORT (7077), SPARK_MASTER_WEBUI_PORT
# (8090; Flink's REST port is 8081), SPARK_WORKER_WEBUI_PORT (8091, 8092 for the
# second worker), SPARK_WORKER_POOL_PORT (50001; Flink's pool uses 50000). Workers,
# their executors and the worker pool inherit this shell's environment (e.g.
# STORAGE_EMULATOR_HOST for a local GCS server).
set -euo pipefail
source "$(dirname "$0")/clusters/common.sh"

SPARK_VERSION=3.5.0
BEAM_JOB_SERVER_VERSION=2.62.0
master_port="${SPARK_MASTER_PORT:-7077}"
master_webui_port="${SPARK_MASTER_WEBUI_PORT:-8090}"
worker_webui_port="${SPARK_WORKER_WEBUI_PORT:-8091}"
pool_port="${SPARK_WORKER_POOL_PORT:-50001}"
workers=2
run="$clusters/spark"
spark_home="$cache/spark-$SPARK_VERSION"
# Beam's runner and its dependencies (fetch_job_server's job-server.jar and lib/),
# and the Spark home the cluster runs from (see make_spark_home): bin/ and sbin/
# from the pyspark sdist, jars/ that and Beam's, and the job server the flags name.
beam_jars="$cache/beam-spark-3-job-server-$BEAM_JOB_SERVER_VERSION"
cluster_home="$cache/beam-spark-3-job-server-$BEAM_JOB_SERVER_VERSION-spark-$SPARK_VERSION"
job_server="$cluster_home/job-server.jar"

# Spark: bin/, sbin/ and jars/ from the pyspark sdist (pyspark's own layout, which pip
# would assemble on install; it is unpacked here, never installed).
fetch_spark() {
  [ -x "$spark_home/bin/spark-class" ] && return 0
  local wheels="$cache/wheels/spark-$SPARK_VERSION"
  echo "Fetching Spark $SPARK_VERSION from the package index" >&2
  ls "$wheels"/pyspark-"$SPARK_VERSION".tar.gz >/dev/null 2>&1 \
    || download_pip "$wheels" "pyspark==$SPARK_VERSION" --no-binary=:all:
  rm -rf "$spark_home.partial" && mkdir -p "$spark_home.partial"
  "$python_bin" - "$wheels/pyspark-$SPARK_VERSION.tar.gz" "$spark_home.partial" <<'PY'
import os, shutil, sys, tarfile
sdist, home = sys.argv[1:]
with tarfile.open(sdist) as tar:
    for member in tar.getmembers():
        parts = member.name.split("/")
        if len(parts) > 3 and parts[1] == "deps" and parts[2] in ("bin", "sbin", "jars") \
                and member.isfile():
            target = os.path.join(home, *parts[2:])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with tar.extractfile(member) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            if member.mode & 0o111:
                os.chmod(target, 0o755)
PY
  [ -f "$spark_home.partial/jars/spark-core_2.12-$SPARK_VERSION.jar" ] \
    || die "the pyspark $SPARK_VERSION sdist holds no jars/spark-core_2.12-$SPARK_VERSION.jar"
  chmod 755 "$spark_home.partial"/bin/* "$spark_home.partial"/sbin/*
  rm -rf "$spark_home" && mv "$spark_home.partial" "$spark_home"
}

# The Spark home the master, the workers and their executors run from, and the job
# server (Spark's driver) too: Spark's jars and Beam's runner with its dependencies
# in one jars/ folder (symlinks), and job-server.jar, whose Class-Path lists them.
# The runner's Spark dependencies are "provided": Beam's shaded job server bundles
# them. Where both hold an artifact (the same groupId:artifactId, from each jar's
# Maven metadata), only the newer version is linked, as Gradle resolves that shaded
# jar: guava 33 for Beam's GCS client, not Spark's guava 14, which an executor would
# load first (its own classpath before the jars the job server ships it) and fail
# with NoSuchMethodError in com.google.common.base.Preconditions.
make_spark_home() {
  [ -f "$job_server" ] && return 0
  rm -rf "$cluster_home.partial" && mkdir -p "$cluster_home.partial/jars"
  ln -s "../spark-$SPARK_VERSION/bin" "$cluster_home.partial/bin"
  ln -s "../spark-$SPARK_VERSION/sbin" "$cluster_home.partial/sbin"
  "$python_bin" - "$cluster_home.partial" "$beam_jars/lib" "$spark_home/jars" \
    org.apache.beam.runners.spark.SparkJobServerDriver <<'PY'
import os, re, sys, zipfile
home, beam_lib, spark_jars, main_class = sys.argv[1:]

def coordinates(path):
    """(groupId:artifactId, version) from the jar's pom.properties, else its name."""
    name = re.sub(r"\.jar$", "", os.path.basename(path))
    with zipfile.ZipFile(path) as jar:
        for prop in jar.namelist():
            if not (prop.startswith("META-INF/maven/") and prop.endswith("/pom.properties")):
                continue
            fields = dict(line.split("=", 1) for line in
                          jar.read(prop).decode("utf-8", "replace").splitlines()
                          if "=" in line and not line.startswith("#"))
            artifact, version = (fields.get(k, "").strip() for k in ("artifactId", "version"))
            # A jar may embed other artifacts' metadata: use the one its name gives.
            if name.startswith(f"{artifact}-{version}"):
                return f"{fields.get('groupId', '').strip()}:{artifact}", version
    match = re.match(r"(.+?)-(\d.*)$", name)
    return (f"?:{match.group(1)}", match.group(2)) if match else (f"?:{name}", "")

def version_key(version):
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.\-_]", version)]

chosen, order = {}, []
for folder in (beam_lib, spark_jars):
    for name in sorted(os.listdir(folder)):
        if name.endswith(".jar"):
            path = os.path.join(folder, name)
            key, version = coordinates(path)
            if key not in chosen:
                order.append(key)
                chosen[key] = (version, path)
            elif version_key(version) > version_key(chosen[key][0]):
                chosen[key] = (version, path)
final = home.removesuffix(".partial")
for key in order:
    path = chosen[key][1]
    os.symlink(os.path.relpath(path, os.path.join(final, "jars")),
               os.path.join(home, "jars", os.path.basename(path)))
# Class-Path entries are relative to the jar; a continuation line starts with one
# space, so each entry line starts with two (the second separates entries).
with open(os.path.join(home, "manifest.txt"), "w") as manifest:
    manifest.write(f"Main-Class: {main_class}\nClass-Path:")
    for key in order:
        manifest.write(f"  jars/{os.path.basename(chosen[key][1])}\n")
PY
  jar --create --file "$cluster_home.partial/job-server.jar" \
    --manifest "$cluster_home.partial/manifest.txt"
  rm -rf "$cluster_home" && mv "$cluster_home.partial" "$cluster_home"
}

# Everything on 127.0.0.1; logs, work and scratch dirs under .clusters/spark/.
spark_env() {
  export SPARK_HOME="$cluster_home" SPARK_CONF_DIR="$run/conf" SPARK_LOG_DIR="$run/logs"
  export SPARK_PID_DIR="$run/pids" SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_HOSTNAME=127.0.0.1
  export SPARK_LOCAL_DIRS="$run/local"
  mkdir -p "$SPARK_CONF_DIR" "$SPARK_LOG_DIR" "$SPARK_LOCAL_DIRS"
  # Finished applications' work dirs (the jars each executor was sent, its logs) are
  # removed after a day; `down` removes their jars.
  cat >"$SPARK_CONF_DIR/spark-defaults.conf" <<CONF
spark.worker.cleanup.enabled true
spark.worker.cleanup.appDataTtl 86400
CONF
}

spark_process() {  # spark_process PIDFILE LOG CLASS ARGS...
  local pidfile="$1" log="$2"; shift 2
  start_process "$pidfile" "$log" "$cluster_home/bin/spark-class" "$@"
}

registered_workers() {
  "$python_bin" - "$master_webui_port" <<'PY' 2>/dev/null || echo 0
import json, sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/json/", timeout=2) as r:
    print(sum(w.get("state") == "ALIVE" for w in json.load(r)["workers"]))
PY
}

up() {
  fetch_job_server "$beam_jars" beam-runners-spark-3 "$BEAM_JOB_SERVER_VERSION" \
    org.apache.beam.runners.spark.SparkJobServerDriver
  fetch_spark
  make_spark_home
  mkdir -p "$run/pids" "$run/logs"
  cluster_status "$run" >/dev/null  # drops the pid files of dead processes
  spark_env
  if [ ! -f "$run/pids/master-1" ]; then
    spark_process "$run/pids/master-1" "$run/logs/master.out" \
      org.apache.spark.deploy.master.Master --host 127.0.0.1 --port "$master_port" \
      --webui-port "$master_webui_port"
    echo "started master $(pid_of "$run/pids/master-1")" >&2
  fi
  wait_for_port "$master_port" 90 "Spark's master"
  local n
  for n in $(seq 1 "$workers"); do
    if [ ! -f "$run/pids/worker-$n" ]; then
      mkdir -p "$run/work/$n"
      SPARK_WORKER_DIR="$run/work/$n" spark_process "$run/pids/worker-$n" \
        "$run/logs/worker-$n.out" org.apache.spark.deploy.worker.Worker \
        "spark://127.0.0.1:$master_port" --host 127.0.0.1 --cores 1 --memory 2g \
        --work-dir "$run/work/$n" --webui-port $((worker_webui_port + n - 1))
      echo "started worker $(pid_of "$run/pids/worker-$n")" >&2
    fi
  done
  finish_up "$run" "$pool_port" "$workers" registered_workers "workers (with the master)"
  # The job server (started by the job) holds Spark's driver: it binds 127.0.0.1 too,
  # and keeps its scratch files under .clusters/spark/.
  # --files_to_stage: the jars Beam's Spark runner sends each executor (Java's
  # filesToStage, which the Python option of that name sets too). By default it
  # sends every jar on the job server's classpath, ~400 MB to each executor of each
  # job, all of which the executors already have from the Spark home; job-server.jar
  # is 4 KB. (The Python SDK stages it as an artifact as well; the worker pool's
  # harnesses ignore artifacts.)
  # --environment_cache_millis keeps an executor's SDK harness between its tasks:
  # Beam's Spark runner otherwise stops it after each task and asks the pool for a
  # new one (a Python start and a TensorFlow import each: the tests' images job
  # started ~80 harnesses in 3.5 min, against 3 in 1 min with the cache).
  # Beam's Python SDK has no parallelism flag for Spark (--parallelism is Flink's):
  # it runs one task per worker core and splits by spark.default.parallelism (2).
  echo "--runner=SparkRunner --spark_master_url=spark://127.0.0.1:$master_port --spark_version=3 --spark_job_server_jar=$job_server --job_server_jvm_property=-Dspark.driver.host=127.0.0.1 --job_server_jvm_property=-Dspark.driver.bindAddress=127.0.0.1 --job_server_jvm_property=-Dspark.local.dir=$run/local --files_to_stage=$job_server --environment_cache_millis=60000 --environment_type=EXTERNAL --environment_config=127.0.0.1:$pool_port"
}

case "${1:-}" in
  up) up ;;
  status) cluster_status "$run" ;;
  down)
    cluster_down "$run"
    # The jars executors were sent (~400 MB each for a job run without the flags'
    # --files_to_stage); their logs stay.
    if [ -d "$run/work" ]; then find "$run/work" -name '*.jar' -delete; fi
    ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
