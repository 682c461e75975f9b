#!/usr/bin/env bash
# The clean-install round: this project as users deploy it, outside the suite's .venv.
#
#   1. copies the checkout's files (tracked + untracked, not ignored: no egg-info, no
#      __pycache__) to a temp dir and builds the sdist there, then the wheel from the
#      sdist (`python -m build --no-isolation` if `build` is installed, else
#      `python setup.py sdist` and `pip wheel --no-deps --no-build-isolation SDIST`):
#      Dataflow's --setup_file stages the sdist, `pip install` users get the wheel;
#   2. checks that the sdist holds every file of the etl/, reader/ and pipelines/
#      packages;
#   3. makes a new, empty venv (`python3.11 -m venv`: no system site-packages, nothing
#      of .venv) and installs the wheel with its install_requires only (no extras),
#      offline from the pip wheel cache .clusters/cache/pip/; the first time (or when
#      setup.py asks for something new) `pip wheel` fills the cache from the package
#      index (scripts/checks/clean_install.py venv);
#   4. from a folder outside the checkout, imports every module of the three packages,
#      asserting each comes from the clean venv's site-packages;
#   5. runs both jobs from that venv, from that folder, with their default flags
#      (statistics and report on; the image job on two worker processes), gs:// → gs://
#      on a local GCS server (tests/gcs_server.py, no credentials), and checks their
#      outputs are byte-identical to the same jobs run from .venv on local disk
#      (scripts/checks/clean_install.py jobs).
#
# Prints each step's time. Usage: bash scripts/checks/clean_install.sh
# (PYTHON=/path/to/python overrides .venv's, which builds and runs the references;
# PYTHON311=/path/to/python3.11 the interpreter of the clean venv.)
set -euo pipefail
cd "$(dirname "$0")/../.."
repo="$(pwd)"
python_bin="${PYTHON:-$repo/.venv/bin/python}"
packages=(etl reader pipelines)
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -x "$python_bin" ] || fail "$python_bin not found; run scripts/setup_env.sh first or set PYTHON=..."

work="$(mktemp -d "${TMPDIR:-/tmp}/clean_install.XXXXXX")"
trap 'rm -rf "$work"' EXIT
round_start="$(date +%s.%N)"
step_start="$round_start"
step_done() {  # Prints the time since the previous step_done (or the start).
  local now
  now="$(date +%s.%N)"
  awk -v name="$1" -v a="$step_start" -v b="$now" \
    'BEGIN { printf "[clean_install] %s: %.1f s\n", name, b - a }'
  step_start="$now"
}

# 1. A clean copy of the sources; the sdist, and the wheel built from it.
mkdir -p "$work/src" "$work/dist"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done \
    | xargs -0 cp --parents -t "$work/src"
else
  cp -r setup.py README.md "${packages[@]}" "$work/src/"
  find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
fi
(
  cd "$work/src"
  if "$python_bin" -c "import build" 2>/dev/null; then
    echo "[clean_install] building with python -m build --no-isolation (sdist, then wheel)"
    "$python_bin" -m build --no-isolation --outdir "$work/dist" . >"$work/build.log" 2>&1
  else
    echo "[clean_install] building with setup.py sdist, then pip wheel of the sdist" \
      "('build' is not installed)"
    "$python_bin" setup.py sdist --dist-dir "$work/dist" >"$work/build.log" 2>&1
    "$python_bin" -m pip wheel --no-deps --no-build-isolation --no-index \
      --wheel-dir "$work/dist" "$work"/dist/*.tar.gz >>"$work/build.log" 2>&1
  fi
) || { cat "$work/build.log" >&2; fail "building the sdist and the wheel failed"; }
shopt -s nullglob
sdists=("$work"/dist/*.tar.gz)
wheels=("$work"/dist/*.whl)
[ "${#sdists[@]}" -eq 1 ] || fail "expected one sdist in dist/, found ${#sdists[@]}"
[ "${#wheels[@]}" -eq 1 ] || fail "expected one wheel in dist/, found ${#wheels[@]}"
sdist="${sdists[0]}"
wheel="${wheels[0]}"
echo "[clean_install] $(basename "$sdist") ($(stat -c %s "$sdist") bytes)," \
  "$(basename "$wheel") ($(stat -c %s "$wheel") bytes)"
if grep -i "warning" "$work/build.log" >&2; then
  echo "(warnings from the build above)" >&2
fi
step_done "1. copy the checkout, build the sdist and the wheel"

# 2. Every file of the packages is in the sdist (paths without the top-level folder).
tar -tzf "$sdist" | sed -n 's#^[^/]*/##p' | grep -v '/$' | sort >"$work/in_sdist.txt"
(cd "$work/src" && find "${packages[@]}" -type f ! -path '*/__pycache__/*' | sort) \
  >"$work/expected.txt"
missing="$(comm -23 "$work/expected.txt" "$work/in_sdist.txt")"
if [ -n "$missing" ]; then
  printf '%s\n' "$missing" >&2
  fail "the sdist lacks the files above"
fi
echo "[clean_install] the sdist holds all $(wc -l <"$work/expected.txt") files of" \
  "${packages[*]}"
step_done "2. check the sdist"

# 3. An empty venv with the wheel and its install_requires, from the pip cache.
# (--no-compile: the first imports compile what they use, not all of TensorFlow.)
"$python_bin" scripts/checks/clean_install.py venv --no_compile "$work/venv" "$wheel" \
  || fail "installing the wheel into an empty venv failed"
venv_python="$work/venv/bin/python"
"$venv_python" -m pip list --format=freeze 2>/dev/null >"$work/installed.txt"
echo "[clean_install] the clean venv holds $(wc -l <"$work/installed.txt") distributions"
# What users get may differ from what the suite tests with (its extras constrain more).
"$python_bin" -m pip list --format=freeze 2>/dev/null >"$work/suite.txt"
versions() { sed -n 's/==/ /p' "$1" | tr 'A-Z_' 'a-z-' | sort; }
echo "[clean_install] versions other than .venv's:" \
  "$(join <(versions "$work/installed.txt") <(versions "$work/suite.txt") \
     | awk '$2 != $3 { d = d sep $1 " " $2 " (.venv " $3 ")"; sep = ", " }
            END { print (d == "" ? "none" : d) }')"
step_done "3. empty venv, pip install the wheel"

# 4. Every module imports, from the clean venv's site-packages, outside the checkout.
clean_site="$("$venv_python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
mkdir "$work/elsewhere"
(
  cd "$work/elsewhere"  # Not the checkout: `import etl` must not find ./etl.
  export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-3}"
  env -u PYTHONPATH "$venv_python" - "$clean_site" "${packages[@]}" 2>"$work/import.log" <<'EOF'
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
print(f"[clean_install] imported {len(imported)} modules from the clean venv's "
      f"site-packages")
EOF
) || { tail -n 40 "$work/import.log" >&2; fail "importing the installed packages failed"; }
step_done "4. import every module"

# 5. Both jobs from the clean venv on gs://, against .venv's on disk.
# (TensorFlow's and libjpeg's messages on stderr go to a log, shown on a failure.)
"$python_bin" scripts/checks/clean_install.py jobs --venv_python "$venv_python" \
  --work "$work" 2>"$work/jobs.log" \
  || { tail -n 150 "$work/jobs.log" >&2; fail "the jobs from the clean venv on gs:// failed"; }
step_done "5. both jobs on gs://, against .venv's on disk"
rm -rf "$work"
step_done "6. remove the temp dir (the clean venv)"
step_start="$round_start"
step_done "the round"
echo "OK: the wheel installs into an empty venv and runs both jobs"
