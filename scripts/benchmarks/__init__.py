"""Benchmarks: one module per benchmark on one harness (``harness.py``).

Run ``python -m scripts.benchmarks --list`` to see them, and
``python -m scripts.benchmarks NAME [--quick] [ARGS...]`` to run one. Each benchmark's
results are one file, ``docs/benchmarks/<NAME>.json``, and one chart, ``<NAME>.png``,
with an entry per setting (the input it ran on): a run replaces its setting's entry
and keeps the others. ``--out`` names another file; ``--quick`` writes to a temporary
folder.
"""
