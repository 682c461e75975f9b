"""The jobs' building blocks, in three packages whose names show the data's path.

- ``images``: image files and labels → checked, decoded, preprocessed examples.
- ``timeseries``: long-format rows → cleaned, split series → normalised windows.
- ``core``: what both jobs share: files, shards, a run's state, tf.Transform,
  statistics, the publishing tail.
- ``testing``: fixtures for users' tests and a written dataset read back as plain
  values (``pipelines.testing`` adds the job runs).

The job packages import the core and never each other; the core imports neither.
"""
