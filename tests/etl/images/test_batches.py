"""Unit tests of etl/images/batches.py's ``batches`` (runs cut by rows, bytes and weight)
and ``read_ahead`` (files read ahead, by count and bytes)."""

from __future__ import annotations

import concurrent.futures

from etl.core.dead_letters import Rejection
from etl.images.batches import HeldBytes, Loaded, batches, read_ahead
from etl.images.sources import ImageRecord


def _image(key: str, weight: int, size: int = 1) -> Loaded:
    return Loaded(ImageRecord(key=key, uri=f"/in/{key}", label="cat"), bytes(size),
                  weight=weight)


def _rejection(key: str) -> Rejection:
    return Rejection(key=key, source=f"/in/{key}", reason="empty_file", message="")


def _keys(runs) -> list[list[str]]:
    return [[item.record.key if isinstance(item, Loaded) else item.key for item in run]
            for run in runs]


def test_batches_are_cut_by_decoded_weight():
    images = [_image(k, w) for k, w in (("a", 300), ("b", 200), ("c", 150), ("d", 400),
                                        ("e", 100))]
    # 300 + 200 reach 500; 150 + 400 would pass it.
    assert _keys(batches(images, rows=32, nbytes=2**30, max_weight=500)) == [
        ["a", "b"], ["c"], ["d", "e"]]


def test_batches_give_an_image_heavier_than_a_batch_one_of_its_own():
    run = [_rejection("r1"), _image("a", 100), _rejection("r2"), _image("big", 900),
           _rejection("r3"), _image("b", 100), _image("c", 100)]
    # The rejections stay where they were met.
    assert _keys(batches(run, rows=32, nbytes=2**30, max_weight=500)) == [
        ["r1", "a", "r2"], ["big"], ["r3", "b", "c"]]


def test_batches_without_a_weight_bound_cut_by_rows_and_bytes_as_before():
    # Files and JPEG pixels (Loaded.buffer_bytes), whatever the images weigh.
    images = [_image(k, 10**9, size=s) for k, s in (("a", 6), ("b", 6), ("c", 1),
                                                    ("d", 1), ("e", 1), ("f", 1))]
    assert _keys(batches(images, rows=3, nbytes=10)) == [
        ["a", "b"], ["c", "d", "e"], ["f"]]


class Immediate(concurrent.futures.Executor):
    """Runs each call as it is submitted; counts them."""

    def __init__(self) -> None:
        self.submitted = 0

    def submit(self, fn, /, *args, **kwargs):
        self.submitted += 1
        future = concurrent.futures.Future()
        future.set_result(fn(*args, **kwargs))
        return future


def _ahead(records, sizes, **limits) -> list[int]:
    """How many files were read ahead of each one read_ahead gives."""
    def load(record: ImageRecord) -> Loaded:
        return _image(record.key, 0, size=sizes[record.key])

    pool = Immediate()
    return [pool.submitted - i for i, _ in enumerate(read_ahead(records, load, pool, **limits))]


def test_read_ahead_holds_at_most_its_files_and_bytes():
    listed = [ImageRecord(key=f"r{i}", uri="", label="cat", listed=(100, 0.0))
              for i in range(6)]
    sizes = {r.key: 100 for r in listed}
    # 250 bytes: two files of 100 read, a third would pass it.
    assert _ahead(listed, sizes, max_files=64, unlisted_bytes=1000, max_bytes=250) == [
        2, 2, 2, 2, 2, 1]
    assert _ahead(listed, sizes, max_files=3, unlisted_bytes=1000, max_bytes=10**9) == [
        3, 3, 3, 3, 2, 1]
    # A manifest's file counts as the file limit until read, then as its size.
    unlisted = [ImageRecord(key=r.key, uri="", label="cat") for r in listed]
    assert _ahead(unlisted, {r.key: 10 for r in unlisted}, max_files=64,
                  unlisted_bytes=200, max_bytes=250) == [6, 5, 4, 3, 2, 1]
    assert _ahead(unlisted, sizes, max_files=64, unlisted_bytes=200, max_bytes=250) == [
        1, 1, 1, 1, 1, 1]


def test_held_bytes_settle_as_reads_end_and_never_after_release():
    held = HeldBytes()
    read, failed, late = (concurrent.futures.Future() for _ in range(3))
    entries = [held.track(estimate, future)
               for estimate, future in ((100, read), (200, failed), (300, late))]
    assert held.total == 600
    read.set_result(_image("a", 0, size=40))  # Counts as its file from now on.
    failed.set_exception(OSError("gone"))  # A failed read keeps its estimate.
    assert held.total == 540
    held.release(entries[2])  # Given out before its read ended (its callback runs
    late.set_result(_image("b", 0, size=7))  # after result() returns): not counted.
    assert held.total == 240
    held.release(entries[0])
    held.release(entries[1])
    assert held.total == 0
