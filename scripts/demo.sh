#!/usr/bin/env bash
# The README's first command: set up, then run the image job end to end on real sample
# data (scikit-learn's 1,797 handwritten digits as an ImageFolder tree) on the local
# runner, and print where the output is with a summary.
# Extra arguments go to the job, e.g.: bash scripts/demo.sh --image_format=png
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh

export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
input=demo_input/digits
output=demo_output/digits
if [ ! -d "$input" ]; then
  .venv/bin/python scripts/make_sample_images.py "$input"
fi
.venv/bin/python -m pipelines.images --input="$input" --output_dir="$output" --name=digits --overwrite "$@"
