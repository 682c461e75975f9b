# Shared by scripts/flink.sh and scripts/spark.sh (sourced, not run): the cache of
# what a local cluster needs, processes tracked by pid files, and the worker pool.
#
# Layout, all under .clusters/ (gitignored):
#   cache/m2/                  Maven's local repository (job server jars and deps)
#   cache/<name>/              a runner's job server (job-server.jar + lib/), a
#                              cluster distribution, the wheels it came from
#   <cluster>/pids/<role>-<n>  the pid of each process `up` started
#   <cluster>/logs/            their logs
#   <cluster>/sdist/venv/      the worker pool's venv: this project's sdist alone
#                              (scripts/checks/sdist_venv.sh)
# A second `up` finds everything in cache/ and downloads nothing.

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
clusters="$repo/.clusters"
cache="$clusters/cache"
python_bin="${PYTHON:-$repo/.venv/bin/python}"

die() { echo "error: $*" >&2; exit 1; }

# Beam's job server for a runner, as Maven Central serves it here: the runner's own
# jar and its dependencies, with a jar whose manifest names them (the shaded
# *-job-server jars are not served; see docs/RUNNING_AT_SCALE.md).
#   fetch_job_server DIR ARTIFACT VERSION MAIN_CLASS
fetch_job_server() {
  local dir="$1" artifact="$2" version="$3" main_class="$4"
  if [ -f "$dir/job-server.jar" ]; then return 0; fi
  command -v mvn >/dev/null || die "mvn not found: install Maven (and Java 17) first"
  echo "Fetching org.apache.beam:$artifact:$version and its dependencies with mvn" >&2
  rm -rf "$dir.partial" && mkdir -p "$dir.partial"
  cat >"$dir.partial/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.tfrecord-etl</groupId><artifactId>job-server</artifactId><version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.beam</groupId><artifactId>$artifact</artifactId><version>$version</version>
    </dependency>
  </dependencies>
</project>
POM
  mvn -q -B -f "$dir.partial/pom.xml" -Dmaven.repo.local="$cache/m2" \
    dependency:copy-dependencies -DoutputDirectory="$dir.partial/lib" -DincludeScope=runtime \
    >"$dir.partial/mvn.log" 2>&1 \
    || { tail -20 "$dir.partial/mvn.log" >&2; die "mvn could not fetch org.apache.beam:$artifact:$version"; }
  # Class-Path entries are relative to the jar; a continuation line starts with one
  # space, so each entry line starts with two (the second separates entries).
  {
    echo "Main-Class: $main_class"
    printf 'Class-Path:'
    (cd "$dir.partial" && for jar in lib/*.jar; do printf '  %s\n' "$jar"; done)
  } >"$dir.partial/manifest.txt"
  jar --create --file "$dir.partial/job-server.jar" --manifest "$dir.partial/manifest.txt"
  rm -rf "$dir" && mv "$dir.partial" "$dir"
}

# pip download into the cache, once: download_pip DIR SPEC [pip args...]
download_pip() {
  local dir="$1" spec="$2"; shift 2
  mkdir -p "$dir"
  "$python_bin" -m pip download --quiet --disable-pip-version-check --no-deps \
    -d "$dir" "$spec" "$@" || die "pip could not download $spec"
}

# Process tracking: one pid file per process `up` started.
# A killed process stays a zombie until its parent reaps it; kill -0 still finds it.
alive() {
  [ -n "$1" ] && kill -0 "$1" 2>/dev/null \
    && [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" != Z ]
}
pid_of() { cat "$1" 2>/dev/null || true; }

# start_process PIDFILE LOG CMD...: starts CMD in its own session (so `down` can stop
# it with its children), records its pid.
start_process() {
  local pidfile="$1" log="$2"; shift 2
  mkdir -p "$(dirname "$pidfile")" "$(dirname "$log")"
  setsid "$@" </dev/null >>"$log" 2>&1 &
  echo "$!" >"$pidfile"
}

# Prints "role pid" for each live process of a cluster; removes stale pid files.
cluster_status() {
  local run="$1" file pid
  shopt -s nullglob
  for file in "$run"/pids/*; do
    pid="$(pid_of "$file")"
    if alive "$pid"; then
      echo "$(basename "$file" | sed 's/-[0-9]*$//') $pid"
    else
      rm -f "$file"
    fi
  done
}

# Stops every process a cluster's `up` started, by pid (its session: the worker
# pool's harnesses too), TERM first, KILL after 15 s.
cluster_down() {
  local run="$1" file pid waited
  shopt -s nullglob
  for file in "$run"/pids/*; do
    pid="$(pid_of "$file")"
    alive "$pid" && kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  done
  for file in "$run"/pids/*; do
    pid="$(pid_of "$file")"
    for waited in $(seq 1 30); do alive "$pid" || break; sleep 0.5; done
    if alive "$pid"; then
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    echo "stopped $(basename "$file" | sed 's/-[0-9]*$//') $pid"
    rm -f "$file"
  done
}

# The worker pool (pipelines/worker_pool.py) from a venv holding this project's
# sdist, started in a folder outside the checkout with no PYTHONPATH: the
# harnesses it starts import our code from the sdist alone, as a cluster's
# workers would. They inherit this environment (STORAGE_EMULATOR_HOST for a
# local GCS server, say).
#   start_worker_pool RUN PORT
start_worker_pool() {
  local run="$1" port="$2"
  echo "Building the worker pool's venv from the sdist" >&2
  bash "$repo/scripts/checks/sdist_venv.sh" "$run/sdist" >"$run/logs/sdist.log" 2>&1 \
    || { cat "$run/logs/sdist.log" >&2; die "building the sdist venv failed"; }
  mkdir -p "$run/workdir"
  (
    cd "$run/workdir"
    unset PYTHONPATH
    export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
    # One thread per TensorFlow op, as the image job sets for its own workers
    # (pipelines/images.py, run_ops_on_one_thread_each): harnesses get the pool's
    # environment, not the launcher's.
    export TF_NUM_INTRAOP_THREADS="${TF_NUM_INTRAOP_THREADS:-1}"
    start_process "$run/pids/worker_pool-1" "$run/logs/worker_pool.log" \
      "$run/sdist/venv/bin/python" -m pipelines.worker_pool --port="$port"
  )
}

# wait_for_port PORT SECONDS WHAT
wait_for_port() {
  local port="$1" seconds="$2" what="$3" i
  for i in $(seq 1 $((seconds * 2))); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.5
  done
  die "$what did not listen on 127.0.0.1:$port within ${seconds}s"
}

# The end of a cluster's `up`: the worker pool if it is not running, then waits for
# it and for COUNT engine workers to register (`registered` prints how many have).
#   finish_up RUN POOL_PORT COUNT REGISTERED_FUNCTION WHAT
finish_up() {
  local run="$1" pool_port="$2" count="$3" registered="$4" what="$5" i
  if [ ! -f "$run/pids/worker_pool-1" ]; then
    start_worker_pool "$run" "$pool_port"
    echo "started worker_pool $(pid_of "$run/pids/worker_pool-1")" >&2
  fi
  wait_for_port "$pool_port" 60 "the worker pool"
  for i in $(seq 1 120); do
    [ "$("$registered")" -ge "$count" ] && return 0
    sleep 0.5
  done
  die "$count $what did not register within 60s (logs: $run/logs)"
}
