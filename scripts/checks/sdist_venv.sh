#!/usr/bin/env bash
# Builds this project's sdist from a clean copy of the checkout and installs it into
# a fresh venv, as a cluster's workers get our code: WORK/src (the copy: tracked and
# untracked files, not ignored ones, so no egg-info or __pycache__), WORK/dist/*.tar.gz
# (built the way Beam's stager does: `python -m build --sdist --no-isolation` if
# `build` is installed, else `python setup.py sdist`) and WORK/venv.
#
# Dependencies: the fresh venv does not reinstall TensorFlow/Beam/tf.Transform (~3 GB):
# a .pth file appends .venv's site-packages to its sys.path. A plain path line in a
# .pth does not process .venv's own .pth files, so .venv's editable install of this
# project (a meta-path finder that maps `etl` to the checkout) is never activated,
# and the fresh venv's site-packages comes first on sys.path. (`--system-site-packages`
# would not help: it exposes the base interpreter's site-packages, not .venv's.)
# Offline: pip runs with --no-index --no-build-isolation.
#
# Usage: bash scripts/checks/sdist_venv.sh WORK   (PYTHON=/path/to/python to override .venv's)
# Used by scripts/checks/sdist_install.sh and by the clusters' worker pools
# (scripts/flink.sh, scripts/spark.sh).
set -euo pipefail
[ "$#" -eq 1 ] || { echo "usage: $0 WORK" >&2; exit 2; }
work="$1"
cd "$(dirname "$0")/../.."
repo="$(pwd)"
python_bin="${PYTHON:-$repo/.venv/bin/python}"
packages=(etl reader pipelines)
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -x "$python_bin" ] || fail "$python_bin not found; run scripts/setup_env.sh first or set PYTHON=..."

rm -rf "$work/src" "$work/dist" "$work/venv"
mkdir -p "$work/src" "$work/dist"
if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git -C "$repo" ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done \
    | xargs -0 cp --parents -t "$work/src"
else
  cp -r setup.py README.md "${packages[@]}" "$work/src/"
  find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
fi
(
  cd "$work/src"
  if "$python_bin" -c "import build" 2>/dev/null; then
    echo "Building the sdist with python -m build --sdist --no-isolation"
    "$python_bin" -m build --sdist --no-isolation --outdir "$work/dist" . >"$work/build.log" 2>&1
  else
    echo "Building the sdist with python setup.py sdist ('build' is not installed)"
    "$python_bin" setup.py sdist --dist-dir "$work/dist" >"$work/build.log" 2>&1
  fi
) || { cat "$work/build.log" >&2; fail "building the sdist failed"; }
shopt -s nullglob
sdists=("$work"/dist/*.tar.gz)
[ "${#sdists[@]}" -eq 1 ] || fail "expected one sdist in dist/, found ${#sdists[@]}"
echo "sdist: $(basename "${sdists[0]}") ($(stat -c %s "${sdists[0]}") bytes)"
if grep -i "warning" "$work/build.log" >&2; then
  echo "(warnings from the sdist build above)" >&2
fi

"$python_bin" -m venv "$work/venv"
venv_python="$work/venv/bin/python"
fresh_site="$("$venv_python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
reused_site="$("$python_bin" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
[ "$fresh_site" != "$reused_site" ] || fail "the fresh venv shares .venv's site-packages"
echo "$reused_site" >"$fresh_site/zz_reuse_dependencies.pth"
"$venv_python" -m pip install --quiet --no-deps --no-index --no-build-isolation \
  --disable-pip-version-check "${sdists[0]}" >"$work/install.log" 2>&1 \
  || { cat "$work/install.log" >&2; fail "pip install of the sdist failed"; }
