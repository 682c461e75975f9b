"""What both jobs share, in the order a record meets it.

0. ``storage`` (with ``gcs``, ``local_tree``): the one seam to files, local or on an
   object store; every other module passes paths.
1. ``text_rows``: CSV / JSON Lines rows, one physical line each.
2. ``hashing``, ``splits``: stable key hashes and the train / validation / test split.
3. ``dead_letters``: rejected inputs, their reason codes and the errors/ file.
4. ``analysis``: tf.Transform fit on train, ``transform_fn`` written; ``exact_stats``,
   ``zscore``: exact train moments, the z-score analyzer and the manifest's statistics;
   ``class_vocabulary``: class ids, numbered by name or by train frequency.
5. ``examples``: a transformed instance → a deterministic ``tf.train.Example``.
6. ``shard_plan``, ``sharding``: shard counts, shard assignment, GZIP TFRecord shard files.
7. ``shard_step``: the frame of every job's shard step, and the ``transform_fn`` loader.
8. ``accounting``: the pieces of a job's check: errors, reconciliation, error fraction.
9. ``manifest``, ``publish``: the tail every job ends with, the manifest written last;
   ``fingerprint``, ``resume``: what a run will produce, and the shards a rerun keeps.
10. ``output_dir``, ``run_lock`` (with ``conditional_writes``), ``fault_injection``:
    whose the output folder is and what a run may delete there, one run per folder,
    test pause points.
11. ``cores``: how many cores this process may run on, which sizes its thread pools.
"""
