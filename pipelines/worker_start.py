"""What each SDK harness of the image job sets when it starts, before any step runs.

Beam imports the modules named by ``--beam_plugins`` in every SDK harness as it
starts (``apache_beam/runners/worker/sdk_worker_main.py``), on any runner; the image
job names this one (``pipelines/images.py``). The job's own process sets the same for
itself (``run_ops_on_one_thread_each``), which is all the default runner needs; a
harness booted on a cluster's host or a Dataflow worker starts with that host's
environment, where TensorFlow would run each op on a thread pool of its own as wide
as the machine.
"""

from __future__ import annotations

import os

INTRA_OP_THREADS_ENV = "TF_NUM_INTRAOP_THREADS"


def run_ops_on_one_thread_each() -> None:
    """Has TensorFlow run each op on one thread, unless ``TF_NUM_INTRAOP_THREADS`` is set.

    The shard step keeps the cores busy with whole images: two graph calls of up to
    32 images each, their per-image ops spread over TensorFlow's inter-op threads,
    with reads and strict checks on threads of their own. A per-op (intra-op) pool
    on the same cores only adds threads that spin and compete: on 2 cores one
    thread per op made both the shard step and the preprocessing ceiling faster
    (docs/RUNNING_AT_SCALE.md, "Throughput"). Each op computes the same bytes on any
    number of threads (tested). No effect where TensorFlow has already started in
    this process (a test, a notebook). The variable stays set for the rest of the
    process, so TensorFlow processes it starts later inherit it too.
    """
    os.environ.setdefault(INTRA_OP_THREADS_ENV, "1")


run_ops_on_one_thread_each()  # A harness imports this module before its first step.
