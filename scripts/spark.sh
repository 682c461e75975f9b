#!/usr/bin/env bash
# A Spark cluster of separate hosts on this machine: scripts/spark.sh up|down|status|env
#
#   up      fetches what is missing into .clusters/cache/ (Beam's Spark job server
#           with mvn, Spark itself from the pyspark sdist on the package index,
#           Beam's Python boot binary with go, the worker image from the package
#           index; a second `up` downloads nothing), then starts what is not running:
#           on the host "spark", a standalone master and one worker of two cores
#           (each job gets one executor of two cores there), and the storage host
#           (a GCS server) on a host of its own. A host is a network namespace on a
#           bridge this script creates, with a filesystem view of its own: the
#           launcher's work tree, .venv and /tmp are not there; one folder,
#           .clusters/spark/shared, is mounted into every host at the same path
#           (tf.Transform's temp files and the job's staged artifacts, as users
#           mount NFS or Filestore). Spark's driver runs in Beam's Spark job server,
#           which each job starts on the launcher (this machine); the executors
#           connect to it at the launcher's address on the bridge. Each executor
#           starts Python SDK harnesses with Beam's boot binary
#           (--environment_type=PROCESS), which installs the job's staged package
#           into a venv over the host's worker image. Root only (ip netns, mount).
#           Its last line is the Beam flags to add to either job.
#   status  one line per process of each host: "ROLE HOST PID" (master, worker,
#           executor, boot, harness, storage, ...).
#   env     the environment a launcher's job and checks need: STORAGE_EMULATOR_HOST=URL
#           (the storage host as this machine reaches it) and no credentials to find.
#   down    stops every process of every host and removes the hosts and the bridge.
#
# Versions: Spark 3.5.0 (Scala 2.12) with Beam 2.62's Spark 3 runner, the newest Beam
# Spark runner whose jars (and their dependencies) Maven Central serves here. That
# runner is compiled against Spark 3.2.2 (its pom's "provided" dependencies) and
# tested by Beam against 3.1.1 to 3.5.0; 3.5.0 is the newest of those, and Java 17
# needs Spark 3.3 or later. The Python SDK and the boot binary are the project's
# (2.77). Addresses: SPARK_SUBNET (10.231.2; Flink's is 10.231.1): the launcher (and
# the driver) is .1, the host "spark" (master on port 7077, web UI 8080) .2, the
# storage host .10.
set -euo pipefail
source "$(dirname "$0")/clusters/common.sh"

SPARK_VERSION=3.5.0
BEAM_JOB_SERVER_VERSION=2.62.0
master_port=7077
master_webui_port=8080
worker_cores=2
subnet="${SPARK_SUBNET:-10.231.2}"
bridge=tfetl-spark
spark_address="$subnet.2"
run="$clusters/spark"
shared="$run/shared"
spark_home="$cache/spark-$SPARK_VERSION"
# Beam's runner and its dependencies (fetch_job_server's job-server.jar and lib/),
# and the Spark home the cluster and the job server run from (see cluster_spark).
beam_jars="$cache/beam-spark-3-job-server-$BEAM_JOB_SERVER_VERSION"
cluster_home="$cache/spark-$SPARK_VERSION-beam-$BEAM_JOB_SERVER_VERSION"
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

# The Spark home the master, the worker and its executors run from (mounted at
# /opt/dist on the host, so hard links, not symlinks out of it), and the job server
# (Spark's driver, on the launcher) too: Spark's bin/ and sbin/, Spark's jars and
# Beam's runner with its dependencies in one jars/ folder, and job-server.jar, whose
# Class-Path lists them. Beam's classes are then on each executor's own classpath,
# loaded by its system class loader before the jars a job sends (Spark's default,
# parent-first), and outlive a job's tasks: an executor keeps its SDK harness for
# --environment_cache_millis between them. The runner's Spark dependencies are
# "provided": Beam's shaded job server bundles them. Where both hold an artifact (the
# same groupId:artifactId, from each jar's Maven metadata), only the newer version is
# linked, as Gradle resolves that shaded jar: guava 33 for Beam's GCS client, not
# Spark's guava 14, which an executor would load first and fail with
# NoSuchMethodError in com.google.common.base.Preconditions. Prints its path.
cluster_spark() {
  if [ ! -f "$cluster_home/ready" ]; then
    rm -rf "$cluster_home.partial" && mkdir -p "$cluster_home.partial/jars"
    cp -al "$spark_home/bin" "$spark_home/sbin" "$cluster_home.partial/"
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
for key in order:
    path = chosen[key][1]
    os.link(path, os.path.join(home, "jars", os.path.basename(path)))
# Class-Path entries are relative to the jar; a continuation line starts with one
# space, so each entry line starts with two (the second separates entries).
with open(os.path.join(home, "manifest.txt"), "w") as manifest:
    manifest.write(f"Main-Class: {main_class}\nClass-Path:")
    for key in order:
        manifest.write(f"  jars/{os.path.basename(chosen[key][1])}\n")
PY
    jar --create --file "$cluster_home.partial/job-server.jar" \
      --manifest "$cluster_home.partial/manifest.txt"
    touch "$cluster_home.partial/ready"
    rm -rf "$cluster_home" && mv "$cluster_home.partial" "$cluster_home"
  fi
  echo "$cluster_home"
}

# The host's configuration (its disk's conf/): a finished application's work dirs
# (the jars each executor was sent, its logs) are removed after a day.
write_conf() {
  local conf="$run/hosts/spark/conf"
  mkdir -p "$conf"
  cat >"$conf/spark-defaults.conf" <<CONF
spark.worker.cleanup.enabled true
spark.worker.cleanup.appDataTtl 86400
CONF
}

# What runs on a host is told by its command line.
process_role() {
  case "$1" in
    *org.apache.spark.deploy.master.Master*) echo master ;;
    *org.apache.spark.deploy.worker.Worker*) echo worker ;;
    *CoarseGrainedExecutorBackend*) echo executor ;;
    *fake-gcs-server*) echo storage ;;
    */opt/boot/container*) echo boot ;;
    *sdk_worker_main*) echo harness ;;
    *pip\ install*) echo pip ;;
    *) echo other ;;
  esac
}

cluster_hosts() {  # "ADDRESS NAME" lines for /etc/hosts
  echo "$subnet.1 launcher"
  echo "$spark_address spark"
  echo "$(storage_address) storage"
}

# has_role ROLE HOST (grep reads all of hosts_status: with -q it could stop early and
# fail the pipeline with SIGPIPE, pipefail reporting a running process as missing)
has_role() { hosts_status | grep "^$1 $2 " >/dev/null; }

registered_cores() {
  "$python_bin" - "$spark_address:$master_webui_port" <<'PY' 2>/dev/null || echo 0
import json, sys, urllib.request
with urllib.request.urlopen(f"http://{sys.argv[1]}/json/", timeout=2) as r:
    print(sum(w.get("cores", 0) for w in json.load(r)["workers"] if w.get("state") == "ALIVE"))
PY
}

up() {
  fetch_job_server "$beam_jars" beam-runners-spark-3 "$BEAM_JOB_SERVER_VERSION" \
    org.apache.beam.runners.spark.SparkJobServerDriver
  fetch_spark
  cluster_spark >/dev/null
  boot_binary="$(fetch_boot_binary)"
  worker_image="$(build_worker_image)"
  # Spark's own names for its processes are the host's address: the driver, on the
  # launcher, reaches the executors by the name they give.
  set_host_environment "SPARK_HOME=/opt/dist" "SPARK_CONF_DIR=/opt/conf" \
    "SPARK_LOG_DIR=/opt/logs" "SPARK_LOCAL_DIRS=/opt/local" "SPARK_WORKER_DIR=/opt/work" \
    "SPARK_LOCAL_IP=$spark_address" "SPARK_LOCAL_HOSTNAME=$spark_address"
  mkdir -p "$shared" "$run/local"
  network_up
  has_role storage storage || start_storage
  host_add spark 2
  write_conf
  mkdir -p "$run/hosts/spark/local" "$run/hosts/spark/work"
  if ! has_role master spark; then
    host_dist="$cluster_home" host_start spark "$run/hosts/spark/logs/master.out" "$shared" \
      /opt/dist/bin/spark-class org.apache.spark.deploy.master.Master \
      --host "$spark_address" --port "$master_port" --webui-port "$master_webui_port"
    echo "started master at $spark_address" >&2
  fi
  wait_for_address "$spark_address" "$master_port" 90 "Spark's master"
  # One worker, so one executor of each job on this host (spark.executor.cores unset:
  # it takes all the worker's cores). Beam's boot binary makes its venv at
  # /opt/apache/beam-venv/beam-venv-worker-ID, with the harness's ID (1-1, 2-1, ...)
  # counted from 1 in each executor: two executors on one host share, and delete,
  # each other's venv (with two executors of one core each, harnesses failed with
  # ModuleNotFoundError for this project's package). The executor runs two tasks at
  # once through its one SDK harness (--sdk_worker_parallelism, 1 by default).
  if ! has_role worker spark; then
    host_dist="$cluster_home" host_start spark "$run/hosts/spark/logs/worker.out" "$shared" \
      /opt/dist/bin/spark-class org.apache.spark.deploy.worker.Worker \
      "spark://$spark_address:$master_port" --host "$spark_address" \
      --cores "$worker_cores" --memory 2g --work-dir /opt/work --webui-port 8081
    echo "started worker at $spark_address" >&2
  fi
  wait_for_count registered_cores "$worker_cores" 120 "Spark's worker"
  # The job server (started by the job, on the launcher) holds Spark's driver: it
  # binds the launcher's address on the bridge, where the executors reach it, and
  # keeps its scratch files under .clusters/spark/local.
  # --files_to_stage: the jars Beam's Spark runner sends each executor (Java's
  # filesToStage, which the Python option of that name sets too). By default it
  # sends every jar on the job server's classpath, ~400 MB to each executor of each
  # job, all of which the executors already have from the Spark home; job-server.jar
  # is 4 KB (the Python SDK stages it as an artifact too: the boot binary fetches
  # it and leaves it be).
  # --artifacts_dir: where the job server keeps the job's staged artifacts (its
  # sdist), which the executors serve to the boot binary from that path.
  # --environment_cache_millis keeps an executor's SDK harness between its tasks:
  # Beam's Spark runner releases it that long after the last task that used it, and
  # without it as soon as no task uses it, booting a new one for the next (a venv, a
  # pip install, a Python start and a TensorFlow import each).
  # Beam's Python SDK has no parallelism flag for Spark (--parallelism is Flink's):
  # it runs one task per executor core and splits by spark.default.parallelism.
  echo "--runner=SparkRunner --spark_master_url=spark://$spark_address:$master_port --spark_version=3 --spark_job_server_jar=$job_server --job_server_jvm_property=-Dspark.driver.host=$subnet.1 --job_server_jvm_property=-Dspark.driver.bindAddress=$subnet.1 --job_server_jvm_property=-Dspark.local.dir=$run/local --files_to_stage=$job_server --environment_type=PROCESS --environment_options=process_command=/opt/boot/container --environment_cache_millis=60000 --artifacts_dir=$shared/artifacts --setup_file=$repo/setup.py --tft_temp_dir=$shared/tft --shared_folders=$shared"
}

case "${1:-}" in
  up) up ;;
  status) hosts_status ;;
  env) launcher_environment ;;
  down) hosts_down; rm -rf "$run/hosts" "$run/local" ;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
