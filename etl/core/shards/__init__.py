"""Shards: where each record goes and how its shard file is written, by key alone.

``hashing`` and ``splits`` give a key its split; ``plan`` how many shards a split
gets; ``placement`` a unit's shard, pending names and the final renames; ``step`` the
fused shard step both jobs end with; ``files`` a shard's framing, deflate and index;
``removal`` takes chosen records out of written shards.
"""
