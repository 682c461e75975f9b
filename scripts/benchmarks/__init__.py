"""Benchmarks: one module per benchmark on one harness (``harness.py``).

Run ``python -m scripts.benchmarks --list`` to see them, and
``python -m scripts.benchmarks NAME [--quick] [ARGS...]`` to run one; results go to
``docs/benchmarks/`` unless ``--out`` says otherwise (``--quick``: a temporary folder).
"""
