#!/usr/bin/env bash
# Checks that setup.py packages the whole project, as Dataflow's --setup_file uses it:
#
#   1. copies the checkout's files (tracked + untracked, not ignored; so no egg-info,
#      no __pycache__) to a temp dir and builds an sdist there the way Beam's stager
#      does: `python -m build --sdist --no-isolation` if `build` is installed, else
#      `python setup.py sdist`;
#   2. checks that the sdist holds every file of the etl/, reader/ and pipelines/
#      packages;
#   3. installs it with --no-deps into a fresh venv and, from a folder outside the
#      checkout, imports every module of the three packages (asserting each comes
#      from the fresh venv, not from the checkout);
#   4. runs both jobs from that venv, from that folder, the way Dataflow workers would
#      run them: --direct_num_workers=2 --direct_running_mode=multi_processing (every
#      step unpickled in worker processes that import only the installed packages),
#      input and output on a local GCS server (tests/gcs_server.py, no credentials),
#      and checks their shards are byte-identical to the same jobs' on local disk,
#      run from the checkout.
#
# Steps 1 and 3 are scripts/checks/sdist_venv.sh (also what the clusters' workers run).
# Usage: bash scripts/checks/sdist_install.sh   (PYTHON=/path/to/python to override)
set -euo pipefail
cd "$(dirname "$0")/../.."
repo="$(pwd)"
python_bin="${PYTHON:-$repo/.venv/bin/python}"
packages=(etl reader pipelines)

if [ ! -x "$python_bin" ]; then
  echo "error: $python_bin not found; run scripts/setup_env.sh first or set PYTHON=..." >&2
  exit 1
fi
work="$(mktemp -d "${TMPDIR:-/tmp}/check_sdist.XXXXXX")"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# 1. A clean copy of the sources, the sdist, and (3.) a fresh venv with it installed.
bash "$repo/scripts/checks/sdist_venv.sh" "$work"
shopt -s nullglob
sdists=("$work"/dist/*.tar.gz)
sdist="${sdists[0]}"

# 2. Every file of the packages is in the sdist (paths without the top-level folder).
tar -tzf "$sdist" | sed -n 's#^[^/]*/##p' | grep -v '/$' | sort >"$work/in_sdist.txt"
(cd "$work/src" && find "${packages[@]}" -type f ! -path '*/__pycache__/*' | sort) \
  >"$work/expected.txt"
missing="$(comm -23 "$work/expected.txt" "$work/in_sdist.txt")"
if [ -n "$missing" ]; then
  printf '%s\n' "$missing" >&2
  fail "the sdist lacks the files above"
fi
echo "sdist holds all $(wc -l <"$work/expected.txt") files of ${packages[*]}"

venv_python="$work/venv/bin/python"
fresh_site="$("$venv_python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"

mkdir "$work/elsewhere"
cd "$work/elsewhere"  # Not the checkout: `import etl` must not find ./etl.
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-3}"
"$venv_python" - "$fresh_site" "${packages[@]}" <<'EOF' || fail "importing the installed packages failed"
import importlib
import os
import pkgutil
import sys

site, packages = os.path.realpath(sys.argv[1]), sys.argv[2:]
imported = []
for name in packages:
    package = importlib.import_module(name)
    modules = [name] + [m.name for m in pkgutil.walk_packages(package.__path__, name + ".")]
    for module_name in modules:
        module = importlib.import_module(module_name)
        where = os.path.realpath(module.__file__)
        if not where.startswith(site + os.sep):
            sys.exit(f"{module_name} was imported from {where}, not from {site}")
        imported.append(module_name)
print(f"imported {len(imported)} modules from the fresh venv: {' '.join(sorted(imported))}")
EOF

# 4. Both jobs from the fresh venv alone, in worker processes, on a local GCS server.
"$python_bin" "$repo/scripts/checks/run_jobs_from_sdist.py" --venv_python "$venv_python" \
  --work "$work" || fail "the jobs from the sdist on gs:// failed"
echo "OK: the sdist of setup.py installs and runs both jobs"
