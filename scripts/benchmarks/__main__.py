"""``python -m scripts.benchmarks --list | NAME [--quick] [ARGS...]`` (see ``harness``)."""

from scripts.benchmarks import harness

if __name__ == "__main__":
    harness.main()
