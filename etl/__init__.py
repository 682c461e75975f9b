"""Reusable ETL building blocks: read, validate, split, preprocess, shard, publish."""
