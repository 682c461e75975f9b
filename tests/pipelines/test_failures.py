"""A run that stops for a resource or environment reason ends with one line.

The texts below are what the runners raised and logged when the image job was made
to fail that way (a write that raised ENOSPC or EACCES in the shard step, a worker
SIGKILLed in it), with the traceback frames between their first and last lines cut and the
installation's path shortened.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import sys
import threading

import pytest

from etl.core.run import fault_injection, resume
from pipelines import common, failures, held_reports
from pipelines.failures import Outcome, Publication, RunFailure
from reader.format import contract
from tests import image_fixtures
from tests.job_commands import start_job
from tests.job_runs import REPORT_DUPLICATES, TEST_IMAGE_SIZE, run_images_job_printing

OUT = "/data/out"
SHARD = f"{OUT}/train/images-train-pending-00000.tfrecord.gz.incomplete"
STEP = " [while running 'Publish/WriteShards/TransformAndWrite/ParDo(TransformAndWriteImageShard)']"
NO_SPACE = os.strerror(errno.ENOSPC)

# The in-process runner (the default): the OSError's repr in a RuntimeError.
IN_PROCESS = f"OSError: [Errno 28] No space left on device: '{SHARD}'{STEP}"
# The same with TensorFlow's file system error (tf.io.gfile) in the step.
IN_PROCESS_TF = ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: "
                 f"{SHARD}; No space left on device{STEP}")
# --direct_running_mode=multi_processing: the worker's traceback as the message.
MULTI_PROCESS = f"""Traceback (most recent call last):
  File "apache_beam/runners/common.py", line 1512, in apache_beam.runners.common.DoFnRunner.process
  File "/work/main/etl/core/sharding.py", line 154, in write_all
    self.write(serialized)
OSError: [Errno 28] No space left on device: '{SHARD}'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File ".venv/lib/python3.11/site-packages/apache_beam/runners/worker/sdk_worker.py", line 310
    response = task()
RuntimeError: OSError: [Errno 28] No space left on device: '{SHARD}'{STEP}
"""
# A worker's log record, forwarded by the multi-process runner as text.
FORWARDED_LOG = ("Worker: severity: ERROR timestamp {   seconds: 1795707302   nanos: "
                 "641216993 } message: \"OSError: [Errno 28] No space left on device: "
                 f"\\'{SHARD}\\' [while running \\'Publish/WriteShards\\']\\nTraceback")
# A SIGKILLed worker, portable runner with a worker subprocess (the multi-process
# runner raises the last line alone), and what the worker's thread reported.
WORKER_KILLED = """Pipeline job-d40ec693 failed in state FAILED: Error running pipeline.
Traceback (most recent call last):
  File ".venv/lib/python3.11/site-packages/apache_beam/runners/worker/data_plane.py", line 591
    element = received.get(timeout=1)
_queue.Empty

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File ".venv/lib/python3.11/site-packages/apache_beam/runners/worker/data_plane.py", line 594
    raise RuntimeError('Channel closed prematurely.')
RuntimeError: Channel closed prematurely."""
WORKER_EXIT = "RuntimeError: Worker subprocess exited with return code 137"
SIGKILLED = "a worker process died: killed by SIGKILL (the out-of-memory killer sends it)"


def beam_in_process(error: OSError) -> RuntimeError:
    """``error`` as the in-process runner re-raises it: its repr in a RuntimeError,
    raised while handling it."""
    try:
        raise error
    except OSError:
        try:
            raise RuntimeError(f"{type(error).__name__}: {error}{STEP}")
        except RuntimeError as wrapped:
            return wrapped


def test_classify_oserror_enospc_names_disk_full_and_file():
    error = OSError(errno.ENOSPC, NO_SPACE, SHARD)
    assert failures.classify(error, [OUT]) == RunFailure(f"disk full: {NO_SPACE}", SHARD)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_classify_real_enospc_without_a_file_name():
    with pytest.raises(OSError) as raised, open("/dev/full", "wb") as f:
        f.write(b"x")
    assert failures.classify(raised.value) == RunFailure(f"disk full: {NO_SPACE}")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_classify_real_tensorflow_enospc_names_the_file():
    import tensorflow as tf

    with pytest.raises(tf.errors.OpError) as raised, tf.io.gfile.GFile("/dev/full", "wb") as f:
        f.write(b"x" * 100_000)
    assert failures.classify(raised.value) == RunFailure(f"disk full: {NO_SPACE}", "/dev/full")


def test_classify_beam_in_process_enospc_reads_its_context():
    assert failures.classify(beam_in_process(OSError(errno.ENOSPC, NO_SPACE, SHARD)), [OUT]) \
        == RunFailure(f"disk full: {NO_SPACE}", SHARD)


@pytest.mark.parametrize("text", [IN_PROCESS, IN_PROCESS_TF, MULTI_PROCESS],
                         ids=["oserror", "tensorflow", "multi_process"])
def test_classify_beam_enospc_text_names_the_file(text):
    assert failures.classify(RuntimeError(text), [OUT]) \
        == RunFailure(f"disk full: {NO_SPACE}", SHARD)


def test_classify_disk_quota_is_disk_full():
    error = OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), SHARD)
    assert failures.classify(error).cause == f"disk full: {os.strerror(errno.EDQUOT)}"


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS])
def test_classify_unwritable_output(code):
    error = beam_in_process(PermissionError(code, os.strerror(code), SHARD))
    assert failures.classify(error, [OUT]) \
        == RunFailure(f"output not writable: {os.strerror(code)}", SHARD)


def test_classify_tensorflow_permission_denied_on_output():
    text = ("tensorflow.python.framework.errors_impl.PermissionDeniedError: "
            f"{SHARD}; Permission denied")
    assert failures.classify(RuntimeError(text + STEP), [OUT]) \
        == RunFailure("output not writable: Permission denied", SHARD)


def test_classify_permission_denied_outside_output_is_unreadable_input():
    error = PermissionError(errno.EACCES, "Permission denied", "/photos/cat/1.jpg")
    assert failures.classify(error, [OUT, "/scratch/tft"]) \
        == RunFailure("input not readable: Permission denied", "/photos/cat/1.jpg")


def test_classify_real_missing_input_is_vanished_input(tmp_path):
    with pytest.raises(FileNotFoundError) as raised:
        open(tmp_path / "rows.csv", "rb")
    assert failures.classify(beam_in_process(raised.value), [OUT]) \
        == RunFailure("input vanished: No such file or directory", str(tmp_path / "rows.csv"))


def test_classify_real_tensorflow_not_found_reads_the_path_out_of_op_text(tmp_path):
    import tensorflow as tf

    path = str(tmp_path / "gone.jpg")
    with pytest.raises(tf.errors.NotFoundError) as raised:
        tf.io.read_file(path)
    assert "{{function_node" in str(raised.value)  # The op's prefix before the path.
    assert failures.classify(raised.value, [OUT]) \
        == RunFailure("input vanished: No such file or directory", path)


def test_classify_missing_file_under_output_is_vanished_output():
    error = FileNotFoundError(errno.ENOENT, "No such file or directory", SHARD)
    assert failures.classify(error, [OUT]).cause == "output vanished: No such file or directory"


def test_classify_relative_output_dir_matches_absolute_path(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    error = PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "out" / "a"))
    assert failures.classify(error, ["out"]).cause == "output not writable: Permission denied"


def test_classify_killed_worker_gives_its_signal():
    assert failures.classify(RuntimeError(WORKER_KILLED), [OUT], [WORKER_EXIT]) \
        == RunFailure(SIGKILLED)


def test_classify_lost_worker_without_exit_status():
    assert failures.classify(RuntimeError("Channel closed prematurely.")) \
        == RunFailure("a worker process died (its connection closed mid-bundle)")


def test_classify_worker_exit_elsewhere_is_not_the_runs_failure():
    assert failures.classify(RuntimeError("boom"), [OUT], [WORKER_EXIT]) is None


@pytest.mark.parametrize("error", [
    RuntimeError("Pipeline finished in state FAILED, not DONE"),
    KeyError("label"),
    RuntimeError("expected No such file or directory to be handled"),
    OSError(errno.EIO, os.strerror(errno.EIO), SHARD),
])
def test_classify_other_errors_is_none(error):
    assert failures.classify(error, [OUT]) is None


def test_worker_exit_status_in_words():
    assert failures.worker_death(["Worker subprocess exited with return code -15"]) \
        == RunFailure("a worker process died: killed by SIGTERM")
    for status in (1, 255):
        assert failures.worker_death([f"Worker subprocess exited with return code {status}"]) \
            == RunFailure(f"a worker process died: exit status {status}")


# What the Flink job server reported when every process of a TaskManager's host was
# killed mid-run (scripts/clusters/check_cluster.py flink --kill_host), and what
# Spark's scheduler says of a lost executor.
HOST_LOST = ("RuntimeError: Pipeline BeamApp-root-1206070057-fb694f26 failed in state "
             "FAILED: org.apache.flink.runtime.jobmaster.JobMasterException: TaskManager "
             "with id 10.231.1.4:45357-723436 is no longer reachable.")


@pytest.mark.parametrize("text, lost", [
    (HOST_LOST, "TaskManager with id 10.231.1.4:45357-723436 is no longer reachable"),
    (("Job aborted due to stage failure: Task 3 in stage 2.0 failed 4 times, most recent "
      "failure: Lost task 3.3 in stage 2.0 (TID 9) (10.231.2.2 executor 1): "
      "ExecutorLostFailure (executor 1 exited caused by one of the running tasks)"),
     "ExecutorLostFailure (executor 1 exited caused by one of the running tasks)"),
])
def test_a_lost_worker_host_is_a_failure_in_one_line(text, lost):
    assert failures.worker_death([text]) == RunFailure(f"a worker host was lost: {lost}")
    assert failures.classify(RuntimeError(text.split(": ", 1)[1]), [OUT]) == RunFailure(
        f"a worker host was lost: {lost}")
    assert failures.reports_failure(None, f"ERROR:root:{text}")


def test_reports_failure_reads_forwarded_worker_logs():
    assert failures.classify_text(FORWARDED_LOG) == RunFailure(f"disk full: {NO_SPACE}", SHARD)
    assert failures.reports_failure(None, FORWARDED_LOG)
    assert not failures.reports_failure(None, "Worker: severity: WARN No semi_persistent")


def test_exception_chain_stops_at_a_cycle():
    first, second = RuntimeError("a"), RuntimeError("b")
    first.__context__, second.__context__ = second, first
    assert failures.exception_chain(first) == [first, second]


def test_format_line_names_cause_path_publication_and_rerun():
    line = failures.format_line(RunFailure(f"disk full: {NO_SPACE}", SHARD),
                                Outcome(OUT, Publication.NONE, 3))
    assert line == (f"error: disk full: {NO_SPACE} ({SHARD}); no dataset was published; a "
                    f"rerun with the same input and options will reuse 3 finished "
                    f"shard(s) ({OUT}).")


def test_format_line_previous_dataset_and_unknown_count():
    line = failures.format_line(RunFailure(SIGKILLED), Outcome(OUT, Publication.PREVIOUS_INTACT,
                                                               None))
    assert line == (f"error: {SIGKILLED}; no new dataset was published; the one already "
                    f"there is unchanged; a rerun will reuse the shards this run finished, "
                    f"if any ({OUT}).")


def test_format_line_after_publication_promises_no_rerun():
    line = failures.format_line(RunFailure(f"disk full: {NO_SPACE}"),
                                Outcome(OUT, Publication.PUBLISHED, 0))
    assert line == (f"error: disk full: {NO_SPACE}; the dataset had been published before "
                    f"the error ({OUT}).")


def test_console_flags_reads_its_flags_and_leaves_the_rest():
    flags = failures.console_flags(["--input=x", "--output_dir", OUT, "--debug",
                                    "--imag_size=3", "--tft_temp_dir=/t"])
    assert flags == failures.ConsoleFlags(True, OUT, "/t")
    assert flags.written_roots() == [OUT, "/t"]
    assert failures.console_flags(["--output_dir_x=1"]) == failures.ConsoleFlags(False, None,
                                                                                 None)


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _record(message: str, error: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(error), error, None) if error is not None else None
    return logging.LogRecord("apache_beam", logging.ERROR, __file__, 1, message, None, exc_info)


def test_held_reports_hold_failure_records_and_pass_others():
    handler, held = _ListHandler(), held_reports.HeldReports()
    handler.addFilter(held.filter_for(handler))
    handler.handle(_record("disk", OSError(errno.ENOSPC, NO_SPACE, SHARD)))
    handler.handle(_record("unrelated warning"))
    handler.handle(_record(FORWARDED_LOG))
    assert handler.messages == ["unrelated warning"]
    assert any(NO_SPACE in text for text in held.texts())
    held.release()
    assert handler.messages == ["unrelated warning", "disk", FORWARDED_LOG]


def test_held_reports_drop_keeps_dropping():
    handler, held = _ListHandler(), held_reports.HeldReports()
    handler.addFilter(held.filter_for(handler))
    handler.handle(_record("disk", OSError(errno.ENOSPC, NO_SPACE, SHARD)))
    held.drop()
    handler.handle(_record("late", OSError(errno.ENOSPC, NO_SPACE, SHARD)))
    handler.handle(_record("unrelated"))
    assert handler.messages == ["unrelated"] and held.texts() == []


def test_held_reports_hold_lost_worker_thread_errors(monkeypatch):
    reported: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: reported.append(str(args.exc_value)))
    monkeypatch.setattr(sys, "stderr", sys.stderr)
    held = held_reports.HeldReports()
    held.hold_thread_errors_and_stderr()
    for message in ("Worker subprocess exited with return code 137", "a bug"):
        error = RuntimeError(message)
        threading.excepthook(threading.ExceptHookArgs([RuntimeError, error, None, None]))
    assert reported == ["a bug"] and held.texts() == [WORKER_EXIT]
    held.release()
    assert reported == ["a bug", "Worker subprocess exited with return code 137"]


def test_held_reports_hold_failure_tracebacks_printed_to_stderr(monkeypatch, capsys):
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    monkeypatch.setattr(sys, "stderr", sys.stderr)
    held = held_reports.HeldReports()
    held.hold_thread_errors_and_stderr()
    # Beam's SDK harness prints a failed bundle's traceback, as LOOPBACK runs it.
    print(MULTI_PROCESS, file=sys.stderr)
    print("[images] 1/6 shards done", file=sys.stderr)
    assert capsys.readouterr().err == "[images] 1/6 shards done\n"
    held.release()
    assert capsys.readouterr().err == MULTI_PROCESS + "\n"


def _failing_run(error: BaseException, *, write_manifest_to: str | None = None):
    """A job's ``run`` that logs ``error`` as Beam does, then raises it."""
    def run(argv):
        if write_manifest_to:
            with open(os.path.join(write_manifest_to, contract.MANIFEST_FILENAME), "w") as f:
                f.write("{}")
        try:
            raise error
        except type(error):
            logging.getLogger("apache_beam.runners.common").exception(error)
            raise
    return run


def _main(monkeypatch, run, *argv: str) -> str:
    monkeypatch.setattr(sys, "argv", ["pipelines.images", *argv])
    with pytest.raises(SystemExit) as exit_info:
        common.main(run)
    return exit_info.value.code


def _record_shards(out: str, count: int) -> None:
    for shard in range(count):
        path = resume.shard_record_path(out, "train", shard)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("{}")


def test_main_reports_resource_failure_in_one_line(tmp_path, monkeypatch, capsys, caplog,
                                                   root_logging):
    out = str(tmp_path / "out")
    _record_shards(out, 2)
    shard = f"{out}/train/images-train-pending-00002.tfrecord.gz.incomplete"
    error = beam_in_process(OSError(errno.ENOSPC, NO_SPACE, shard))
    code = _main(monkeypatch, _failing_run(error), f"--output_dir={out}")
    assert code == (f"error: disk full: {NO_SPACE} ({shard}); no dataset was published; a "
                    f"rerun with the same input and options will reuse 2 finished "
                    f"shard(s) ({out}).")
    assert "Traceback" not in capsys.readouterr().err
    assert not [r for r in caplog.records if r.exc_info]


def test_main_debug_shows_traceback_and_log_then_the_line(tmp_path, monkeypatch, capsys,
                                                          caplog, root_logging):
    out = str(tmp_path / "out")
    error = beam_in_process(OSError(errno.ENOSPC, NO_SPACE, f"{out}/train/x"))
    code = _main(monkeypatch, _failing_run(error), f"--output_dir={out}", "--debug")
    assert code.startswith(f"error: disk full: {NO_SPACE} ({out}/train/x); no dataset")
    err = capsys.readouterr().err
    assert "Traceback" in err and f"OSError: [Errno 28] {NO_SPACE}" in err
    assert [r.exc_info[1] for r in caplog.records if r.exc_info] == [error]


def test_main_unexpected_error_keeps_traceback_then_the_line(tmp_path, monkeypatch, capsys,
                                                             root_logging):
    out = str(tmp_path / "out")
    code = _main(monkeypatch, _failing_run(KeyError("label")), f"--output_dir={out}")
    assert code == ("error: the run stopped on an unexpected KeyError (traceback above); no "
                    "dataset was published; a rerun with the same input and options will "
                    f"reuse 0 finished shard(s) ({out}).")
    assert "Traceback" in capsys.readouterr().err


def test_main_tells_an_unchanged_previous_dataset(tmp_path, monkeypatch, root_logging):
    (tmp_path / contract.MANIFEST_FILENAME).write_text('{"version": 1}')
    error = OSError(errno.ENOSPC, NO_SPACE, str(tmp_path / "train" / "x"))
    code = _main(monkeypatch, _failing_run(error), f"--output_dir={tmp_path}")
    assert "; no new dataset was published; the one already there is unchanged; " in code


def test_main_tells_a_dataset_published_before_the_error(tmp_path, monkeypatch, root_logging):
    error = OSError(errno.ENOSPC, NO_SPACE, str(tmp_path / "tmp" / "x"))
    code = _main(monkeypatch, _failing_run(error, write_manifest_to=str(tmp_path)),
                 f"--output_dir={tmp_path}")
    assert code.endswith(f"; the dataset had been published before the error ({tmp_path}).")


def test_main_keeps_option_errors_in_one_line(monkeypatch, root_logging):
    code = _main(monkeypatch, _failing_run(ValueError("--input is required (see --help).")))
    assert code == "error: --input is required (see --help)."


def test_images_job_on_a_full_disk_ends_in_one_line_and_the_rerun_reuses_its_shards(tmp_path):
    # The disk fills after some shards are written (ETL_FAIL_WRITES_AFTER_BYTES,
    # etl/core/run/fault_injection.py): one line names the cause and the shard file.
    root, out = str(tmp_path / "in"), tmp_path / "out"
    image_fixtures.write_image_folder(root, copies=1)
    job = start_job("images", f"--input={root}", f"--output_dir={out}",
                    f"--image_size={TEST_IMAGE_SIZE}", "--num_shards=2",
                    env={fault_injection.WRITE_BUDGET_ENV: "6000"})
    _, stderr = job.communicate(timeout=600)
    last = stderr.rstrip("\n").splitlines()[-1]
    assert job.returncode != 0, stderr[-3000:]
    assert not (out / contract.MANIFEST_FILENAME).exists()
    assert "Traceback" not in stderr, stderr[-3000:]
    where = re.escape(str(out))
    match = re.fullmatch(rf"error: disk full: {NO_SPACE} \(({where}/[^)]+)\); no dataset was "
                         rf"published; a rerun with the same input and options will reuse "
                         rf"(\d+) finished shard\(s\) \({where}\)\.", last)
    assert match, last
    assert match.group(1).endswith(".tfrecord.gz.incomplete")
    reused = int(match.group(2))
    assert reused == resume.count_recorded_shards(str(out)) > 0
    # Space freed, the rerun keeps the shards that were finished and writes the rest.
    _, stdout, _ = run_images_job_printing(root, str(out), "--num_shards=2",
                                           REPORT_DUPLICATES)
    assert (out / contract.MANIFEST_FILENAME).exists()
    assert f"resumed: {reused} shard(s) kept from the interrupted run" in stdout, stdout


def test_main_keeps_a_message_quoting_a_line_break_on_one_line(tmp_path, monkeypatch,
                                                               root_logging):
    # A key or class folder may hold a line break; the error line still is one line.
    code = _main(monkeypatch, _failing_run(ValueError("e.g. two\nlines/c.png\r")),
                 f"--output_dir={tmp_path}")
    assert code == "error: e.g. two\\nlines/c.png\\r"


def test_main_takes_a_unicode_error_for_a_bug_not_a_users_value(tmp_path, monkeypatch,
                                                                capsys, root_logging):
    error = UnicodeEncodeError("utf-8", "caf\udce9", 3, 4, "surrogates not allowed")
    code = _main(monkeypatch, _failing_run(error), f"--output_dir={tmp_path}")
    assert code.startswith("error: the run stopped on an unexpected UnicodeEncodeError "
                           "(traceback above)")
    assert "Traceback" in capsys.readouterr().err
