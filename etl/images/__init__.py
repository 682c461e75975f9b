"""The image job's steps, in data order.

1. ``sources``: an ImageFolder tree or a CSV / JSONL manifest → ``ImageRecord``s.
2. ``shard_plan``: keys and a sample → how many shards each split gets (core ``PlanShards``).
3. ``loading``: read a file, check limits and format, strict JPEG decode at the DCT scale.
4. ``exif``, ``codec``: orientation, decode → resize → crop → encode (graph ops).
5. ``preprocessing``: the tf.Transform ``preprocessing_fn`` and its config.
6. ``batches``, ``shards``, ``progress``: the shard step (core ``ShardStep``): read →
   decode a batch → transform → serialize → write; a progress line per shard.
7. ``accounting``: every listed image written or rejected, before the manifest.
"""
