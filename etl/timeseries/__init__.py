"""The time-series job's steps, in data order.

1. ``sources``: what a long-format row means, the input files, the labels file;
   ``first_chunk``: each file's first rows, parsed on the driver, stop a job whose
   rows would all be rejected for one reason before it runs.
2. ``read``: input ``ranges`` → columns (``parsing``, ``parsed_rows``, ``time_texts``)
   → ``chunks`` per bucket of series, spilled.
3. ``buckets``: a bucket's chunks → each ``series`` cleaned, split and cut into window
   ``runs``; exact train moments (``etl.core.transform.exact_stats``) for the analysis; with
   column ``roles``, the ``covariates`` checks (statics, log1p, missing known values).
4. ``preprocessing``: the tf.Transform ``preprocessing_fn`` (z-score, labels, the
   covariate blocks and ``calendar`` features) and the manifest's ``normalisation``
   entry, from the same train moments.
5. ``shards``: the fused shard step: runs → windows → transform → ``window_examples``.
6. ``summary``, ``accounting``: the manifest's settings, counts and empty-split reasons;
   every row and window written or rejected, before the manifest.
"""
