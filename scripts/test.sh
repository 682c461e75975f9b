#!/usr/bin/env bash
# The README's second command (and what .ci/run calls): set up, lint, run every test.
# Extra arguments go to pytest, e.g.: bash scripts/test.sh -k sharding
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh

export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
.venv/bin/ruff check .
# Three test processes (TEST_WORKERS overrides; 0 runs in this process, as a debugger
# wants): tests often wait for a job command they started, and a third process keeps
# two cores busy meanwhile (docs/TESTING.md has the measured times). --dist loadfile
# keeps each module's tests, and the job runs its module fixtures share, in one
# process. pytest exits 5 when it collects no test; set -e turns that into a failure.
.venv/bin/python -m pytest -n "${TEST_WORKERS:-3}" --dist loadfile "$@"
# What users deploy: the sdist Dataflow's workers get and the wheel `pip install`
# gives, that wheel alone with its install_requires in an empty venv (offline from the
# pip cache in .clusters/cache/, filled from the package index the first time), both
# jobs from it in worker processes on a local GCS server, byte-identical to .venv's
# (scripts/checks/clean_install.sh). Skipped when pytest was given arguments (a
# partial run).
# And what a training install without TensorFlow gets: docs/READER.md's TF-free
# install command in a fresh venv, reading the three kinds of dataset.
# And both jobs on a Flink and a Spark cluster of separate hosts (scripts/flink.sh,
# scripts/spark.sh: network and mount namespaces, so root; Java, Maven and Go, and the
# first time the package index, Maven Central and the Go module proxy): gs:// to
# gs://, byte-identical to the default runner.
if [ "$#" -eq 0 ]; then
  bash scripts/checks/clean_install.sh
  .venv/bin/python scripts/checks/tf_free_reader.py
  .venv/bin/python scripts/clusters/check_cluster.py flink
  .venv/bin/python scripts/clusters/check_cluster.py spark
fi
