"""Duplicate images within and across splits, from signatures of each image's one decode.

``signatures`` takes an image's three signatures; ``groups`` finds exact and near
groups and pairs as pure functions; ``buckets`` carries members between stages as
plain tuples; ``search`` runs it all in Beam (``FindDuplicates``).
"""
