#!/usr/bin/env bash
# Creates ./.venv with Python 3.11 and installs this project with its test and demo
# extras (tensorflow 2.21, tensorflow-transform 1.21, apache-beam 2.77: ~3 GB, a few
# minutes the first time). Re-running is cheap: nothing is reinstalled unless
# setup.py changed. Override the interpreter with PYTHON=/path/to/python3.11.
# Where Debian's `chromium` is missing it is installed with apt (the report's browser
# test opens the report in it; Playwright, from the test extra, drives that binary and
# never downloads one); without apt (or root) it says so and the test skips.
set -euo pipefail
cd "$(dirname "$0")/.."

python_bin="${PYTHON:-$(command -v python3.11 || command -v python3 || true)}"
if [ -z "$python_bin" ]; then
  echo "error: no python3.11 found; install Python 3.11 or set PYTHON=..." >&2
  exit 1
fi
version="$("$python_bin" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
case "$version" in
  3.11|3.12) ;;
  *) echo "error: $python_bin is Python $version; tensorflow 2.21 + tfx-bsl 1.21 need 3.11 or 3.12 (3.11 recommended)." >&2
     exit 1 ;;
esac

if [ ! -x .venv/bin/python ]; then
  echo "Creating .venv with $python_bin (Python $version)"
  "$python_bin" -m venv .venv
fi

stamp=".venv/.installed-$(sha256sum setup.py | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "Installing the project and its dependencies into .venv (first time: a few minutes)"
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[test,demo]"
  rm -f .venv/.installed-*
  touch "$stamp"
fi

# tests/reader/report/test_browser.py opens the dataset report in headless Chromium:
# Debian's package (about 290 MB installed; fonts so text renders in screenshots).
if ! command -v chromium >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo="sudo"
  fi
  if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || [ -n "$sudo" ]; }; then
    echo "Installing Debian's chromium for the report's browser test (apt-get)"
    packages=(chromium fonts-dejavu-core)
    export DEBIAN_FRONTEND=noninteractive
    # Stale package lists first try as they are, then refreshed.
    $sudo apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null \
      || { $sudo apt-get update -qq && \
           $sudo apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null; }
  else
    echo "note: chromium is not installed and apt-get (as root or with sudo) is not" \
         "available: tests/reader/report/test_browser.py will skip (and fail under CI)." \
         "Install Debian's chromium package, or a Chromium at /usr/bin/chromium." >&2
  fi
fi
