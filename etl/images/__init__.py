"""The image job's steps, in data order.

1. ``sources``: an ImageFolder tree or a CSV / JSONL manifest → ``ImageRecord``s.
2. ``shard_plan``: keys and a sample → how many shards each split gets.
3. ``loading``: read a file, check limits and format, strict JPEG decode at the DCT scale.
4. ``exif``, ``codec``: orientation, decode → resize → crop → encode (graph ops).
5. ``preprocessing``: the tf.Transform ``preprocessing_fn`` and its config.
6. ``shards``: the fused shard step: read → transform → serialize → write.
"""
