"""What both jobs share, from the bottom up: each package imports only those before it.

- ``io/``: the one seam to files, local or on an object store, and text rows.
- ``hashing``, ``dead_letters``, ``singletons``, ``column_hints``, ``cores``: stable key
  hashes; rejected inputs and the errors/ file; one-element steps from side inputs;
  the flag to pass for a missing column; the cores this process may use.
- ``run/``: a run's state in its output folder: ownership, lock, fingerprint, resume,
  versions.
- ``shards/``: splits, shard plans, the fused shard step, shard files, their names.
- ``transform/``: tf.Transform's fit on train, ``transform_fn``, examples encoded.
- ``stats/``: a written dataset's statistics in TFDV's format.
- ``publishing/``: the tail every job ends with, the manifest written last.
"""
