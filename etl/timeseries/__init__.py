"""The time-series job's steps, in data order.

1. ``rows/``: the input files read into typed rows, chunked per bucket of series and
   spilled; each file's first rows checked before the job starts.
2. ``buckets``: a bucket's chunks → each ``series`` cleaned, split and cut into window
   ``runs``; exact train moments for the analysis; with column ``roles``, the
   ``covariates`` checks (statics, log1p, missing known values) and ``categories``
   (train-only vocabularies); ``row_statistics`` of the rows and series kept.
3. ``preprocessing``: the tf.Transform ``preprocessing_fn`` (z-score, ``per_series``
   moments, labels, the covariate blocks and ``calendar`` features) and the
   manifest's ``normalisation`` entry, from the same train moments.
4. ``shards``: the fused shard step: runs → windows → transform → ``window_examples``.
5. ``summary``, ``accounting``: the manifest's settings, counts and empty-split reasons;
   every row and window written or rejected, before the manifest.
"""
