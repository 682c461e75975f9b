#!/usr/bin/env bash
# Runs a job on Google Cloud Dataflow (python -m pipelines.images or pipelines.timeseries).
#
# Usage:
#   bash scripts/submit_dataflow.sh [images|timeseries] PROJECT REGION BUCKET [extra flags...]
#   PROJECT=... REGION=... BUCKET=... bash scripts/submit_dataflow.sh [images|timeseries] [extra flags...]
#
# The job defaults to images. BUCKET is a bucket name (my-bucket) or gs:// URL
# (gs://my-bucket[/prefix]). Optional environment variables, with their defaults:
#   INPUT=gs://BUCKET/images          images: ImageFolder tree or manifest .csv/.jsonl
#         gs://BUCKET/series/*.csv    timeseries: long-format CSV/JSONL/Parquet, or glob
#   OUTPUT=gs://BUCKET/out/<job>      dataset output directory
#   MACHINE_TYPE=n2-standard-4        Dataflow worker machine type
#   PYTHON=.venv/bin/python           launcher interpreter; its Python minor version
#                                     picks the Dataflow SDK container (3.11 -> py3.11)
# Extra arguments go to the job, e.g. --image_size=128 --max_num_workers=20
# --job_name=images-$(date +%Y%m%d) --overwrite; the time-series job needs its
# column and window flags (--timestamp_column, --value_columns, --window_size, ...).
# tf.Transform's scratch folder is OUTPUT/tmp unless --tft_temp_dir=gs://... is given;
# local paths are refused (workers cannot see this machine's disk).
#
# Workers install this project and its pinned dependencies from ./setup.py
# (--setup_file) when they start; the launcher needs Google Cloud credentials
# (gcloud auth application-default login) and read access to INPUT.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat >&2 <<'EOF'
usage: bash scripts/submit_dataflow.sh [images|timeseries] PROJECT REGION BUCKET [extra flags...]
   or: PROJECT=... REGION=... BUCKET=... bash scripts/submit_dataflow.sh [images|timeseries] [extra flags...]
  PROJECT  Google Cloud project id        (e.g. my-project)
  REGION   Dataflow region                (e.g. us-central1)
  BUCKET   GCS bucket name or gs:// URL   (e.g. my-bucket or gs://my-bucket/prefix)
optional env: INPUT (default gs://BUCKET/images, or gs://BUCKET/series/*.csv),
              OUTPUT (default gs://BUCKET/out/<job>), MACHINE_TYPE (default n2-standard-4),
              PYTHON (default .venv/bin/python)
EOF
  exit 2
}

case "${1:-}" in -h|--help) usage ;; esac
job=images
case "${1:-}" in images|timeseries) job="$1"; shift ;; esac
# Positional PROJECT REGION BUCKET, only when the first argument is not a flag.
if [ "$#" -ge 3 ] && [ "${1#-}" = "$1" ]; then
  PROJECT="$1" REGION="$2" BUCKET="$3"
  shift 3
elif [ "$#" -ge 1 ] && [ "${1#-}" = "$1" ]; then
  echo "error: give all three of PROJECT REGION BUCKET as arguments, or set them as" \
       "environment variables." >&2
  usage
fi
missing=()
for name in PROJECT REGION BUCKET; do
  [ -n "${!name:-}" ] || missing+=("$name")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "error: missing ${missing[*]}" >&2
  usage
fi

bucket_url="${BUCKET%/}"
case "$bucket_url" in
  gs://?*) ;;
  *://*) echo "error: BUCKET must be a GCS bucket (gs://...), got $BUCKET" >&2; exit 2 ;;
  *) bucket_url="gs://$bucket_url" ;;
esac
if [ "$job" = images ]; then
  input="${INPUT:-$bucket_url/images}"
else
  input="${INPUT:-$bucket_url/series/*.csv}"
fi
output="${OUTPUT:-$bucket_url/out/$job}"
for pair in "INPUT=$input" "OUTPUT=$output"; do
  case "${pair#*=}" in
    gs://?*) ;;
    *) echo "error: ${pair%%=*} must be a gs:// path on Dataflow, got ${pair#*=}" >&2
       exit 2 ;;
  esac
done
python_bin="${PYTHON:-.venv/bin/python}"
if [ ! -x "$python_bin" ] && ! command -v "$python_bin" >/dev/null 2>&1; then
  echo "error: $python_bin not found; run scripts/setup_env.sh first or set PYTHON=..." >&2
  exit 1
fi

cmd=(
  "$python_bin" -m "pipelines.$job"
  --input="$input"
  --output_dir="$output"
  --runner=DataflowRunner
  --project="$PROJECT"
  --region="$REGION"
  --temp_location="$bucket_url/tmp"
  --staging_location="$bucket_url/staging"
  --setup_file=./setup.py
  --machine_type="${MACHINE_TYPE:-n2-standard-4}"
  "$@"
)
printf 'Running:'
printf ' %q' "${cmd[@]}"
printf '\n'
exec "${cmd[@]}"
