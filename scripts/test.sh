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
# What Dataflow's workers get: the sdist of setup.py alone, in a fresh venv, running
# both jobs in worker processes on a local GCS server (docs/RUNNING_AT_SCALE.md).
# Skipped when pytest was given arguments (a partial run).
# And what a training install without TensorFlow gets: docs/READER.md's TF-free
# install command in a fresh venv, reading the three kinds of dataset.
# And both jobs on a local Flink cluster and on a local Spark cluster (scripts/flink.sh,
# scripts/spark.sh; Java and Maven, and the first time the package index and Maven
# Central): every job on disk and on gs://, byte-identical to the default runner.
if [ "$#" -eq 0 ]; then
  bash scripts/checks/sdist_install.sh
  .venv/bin/python scripts/checks/tf_free_reader.py
  .venv/bin/python scripts/clusters/check_cluster.py flink
  .venv/bin/python scripts/clusters/check_cluster.py spark
fi
