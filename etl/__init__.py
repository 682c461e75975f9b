"""The ETL job's building blocks, in three packages whose names show the data's path.

- ``etl.images``: image files and labels → checked, decoded, preprocessed examples.
- ``etl.timeseries``: long-format rows → cleaned, split series → normalised windows.
- ``etl.core``: what both jobs share: keys, splits, rejections, analysis, shards, manifest.

The job packages import the core and never each other; the core imports neither.
"""
