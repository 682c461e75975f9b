#!/usr/bin/env bash
# The README's first command: set up, then run the jobs end to end on real sample data
# on the local runner, printing where the output is and a summary of each:
#   1. the image job (main job) on scikit-learn's 1,797 handwritten digits;
#   2. the time-series job on statsmodels' weekly Mauna Loa CO2 series.
# Extra arguments go to the image job, e.g.: bash scripts/demo.sh --image_format=png
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh

# The jobs hide TensorFlow's C++ start-up lines themselves unless TF_CPP_MIN_LOG_LEVEL
# is set (pipelines/quiet_start.py), so it is deliberately not set here.
if [ ! -d demo_input/digits ]; then
  .venv/bin/python scripts/make_sample_images.py demo_input/digits
fi
.venv/bin/python -m pipelines.images --input=demo_input/digits \
  --output_dir=demo_output/digits --name=digits --overwrite "$@"

if [ ! -f demo_input/co2.csv ]; then
  .venv/bin/python scripts/make_sample_series.py demo_input/co2.csv
fi
.venv/bin/python -m pipelines.timeseries --input=demo_input/co2.csv \
  --output_dir=demo_output/co2 --name=co2 --timestamp_column=date --value_columns=co2 \
  --window_size=52 --horizon=4 --missing=interpolate --overwrite
