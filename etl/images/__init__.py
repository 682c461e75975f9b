"""The image job's steps, in data order.

1. ``sources``: an ImageFolder tree or a CSV / JSONL manifest → ``ImageRecord``s, their
   ``labels`` (classes, targets, carried text; the manifest's ``label_entries``).
2. ``shard_plan``: keys and a sample → how many shards each split gets.
3. ``loading``: read a file, check limits and format, strict JPEG decode at DCT scale.
4. ``exif``, ``codec``: orientation, decode → resize → crop → encode (graph ops).
5. ``preprocessing``: the tf.Transform ``preprocessing_fn`` and its config.
6. ``batches``, ``shards``, ``progress``: the shard step: read → decode a batch →
   transform → serialize → write; a progress line per shard. Each image's ``facts``
   (sizes, ``quality`` measures, duplicate signatures) come from that one decode.
7. ``duplicates/``: duplicate images within and across splits, from the signatures.
8. ``stats``: the statistics and quality flags, from the facts.
9. ``accounting``: every listed image written or rejected, before the manifest.
"""
