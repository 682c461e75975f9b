"""Failures that stop a run for a resource or environment reason, told in one line.

A run that stops because the disk is full, the output cannot be written, an input
vanished or a worker process was killed reaches the console entry as whatever its
runner raises: the in-process runner re-raises a step's ``OSError`` as a
``RuntimeError`` holding its repr (the original as ``__context__``), the
multi-process and portable runners as a ``RuntimeError`` holding the worker's whole
traceback as text, a dead worker as ``RuntimeError('Channel closed prematurely.')``.
``classify`` finds the cause in the exception chain or in that text;
``format_line`` states it with what is left in the output directory::

    failure = classify(error, written_roots=[output_dir])
    if failure is not None:
        sys.exit(format_line(failure, Outcome(output_dir, Publication.NONE, 3)))

``reports_failure`` tells which log records and thread errors belong to such a
failure (``pipelines/held_reports.py`` holds them back while the job runs).
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import errno
import os
import posixpath
import re
import signal
from collections.abc import Iterable, Sequence

DISK_FULL = "disk full"
OUTPUT_NOT_WRITABLE = "output not writable"
INPUT_NOT_READABLE = "input not readable"
INPUT_VANISHED = "input vanished"
OUTPUT_VANISHED = "output vanished"
FILE_VANISHED = "a file vanished"
WORKER_DIED = "a worker process died"

_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_ACCESS_ERRNOS = (errno.EACCES, errno.EPERM)
_KNOWN_ERRNOS = (*_DISK_FULL_ERRNOS, *_ACCESS_ERRNOS, errno.EROFS, errno.ENOENT)
# Strings that name their cause wherever they appear; "Permission denied" and
# "No such file or directory" count only in an OSError's or TensorFlow's own form.
_UNAMBIGUOUS_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)

# Python's OSError text: "[Errno 28] No space left on device: '/out/a'" (the quotes
# escaped as \' in a worker's log forwarded as text).
_ERRNO_TEXT = re.compile(r"\[Errno (\d+)\] ")
_QUOTED_PATH = re.compile(r"""^: \\?(['"])(.*?)\\?\1""")
# The worker handler of the multi-process and portable runners, its worker gone.
_WORKER_EXIT = re.compile(r"Worker subprocess exited with return code (-?\d+)")
_WORKER_LOST = ("Channel closed prematurely",)
# A cluster's engine, one of its worker hosts gone (killed, out of memory, the machine
# lost): Flink's JobMaster and network stack, Spark's scheduler.
_HOST_LOST = re.compile(r"TaskManager with id \S+ is no longer reachable"
                        r"|Heartbeat of TaskManager with id \S+ timed out"
                        r"|Connection unexpectedly closed by remote task manager"
                        r"|ExecutorLostFailure \([^)]*\)|Lost executor \S+ on \S+")


@dataclasses.dataclass(frozen=True)
class RunFailure:
    """Why a run stopped: ``cause`` in words ("disk full: No space left on device"),
    and the file or folder involved, when the error names one."""

    cause: str
    path: str | None = None


class Publication(enum.Enum):
    """What the output directory holds after a failed run."""

    NONE = "no dataset was published"
    PREVIOUS_INTACT = "no new dataset was published; the one already there is unchanged"
    PUBLISHED = "the dataset had been published before the error"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The output directory after a failed run: whether a dataset was published,
    and how many finished shards a rerun reuses (None: unknown)."""

    output_dir: str | None
    publication: Publication
    reusable_shards: int | None


def exception_chain(error: BaseException) -> list[BaseException]:
    """``error``, then its ``__cause__`` (or else ``__context__``), and so on."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _is_under(path: str, roots: Sequence[str]) -> bool:
    def normal(p: str) -> str:
        return posixpath.normpath(p) if "://" in p else os.path.abspath(p)

    target = normal(path)
    return any(target == normal(root) or target.startswith(normal(root).rstrip("/") + "/")
               for root in roots)


def _errno_failure(code: int, path: str | None, written_roots: Sequence[str]
                   ) -> RunFailure:
    """The failure an ``errno`` of ``_KNOWN_ERRNOS`` on ``path`` means: its words
    depend on whether ``path`` is one the run writes (under ``written_roots``)."""
    strerror = os.strerror(code)
    written = None if path is None or not written_roots else _is_under(path, written_roots)
    if code in _DISK_FULL_ERRNOS:
        kind = DISK_FULL
    elif code == errno.EROFS or (code in _ACCESS_ERRNOS and written is not False):
        kind = OUTPUT_NOT_WRITABLE
    elif code in _ACCESS_ERRNOS:
        kind = INPUT_NOT_READABLE
    else:
        kind = {True: OUTPUT_VANISHED, False: INPUT_VANISHED, None: FILE_VANISHED}[written]
    return RunFailure(f"{kind}: {strerror}", path)


def _python_form(text: str) -> tuple[int, str | None] | None:
    """``(errno, path)`` of the first "[Errno N] <strerror>[: '<path>']" in ``text``
    whose N is a known errno."""
    for match in _ERRNO_TEXT.finditer(text):
        code = int(match.group(1))
        rest = text[match.end():]
        if code in _KNOWN_ERRNOS and rest.startswith(os.strerror(code)):
            quoted = _QUOTED_PATH.match(rest[len(os.strerror(code)):])
            return code, quoted.group(2) if quoted else None
    return None


def _tensorflow_form(text: str) -> tuple[int, str | None] | None:
    """``(errno, path)`` of the first "<path>; <strerror>" in ``text`` (TensorFlow's
    file-system errors), else of an unambiguous strerror anywhere in it."""
    found = []
    for code in _KNOWN_ERRNOS:
        strerror = re.escape(os.strerror(code))
        # The path runs from the line's start, a ": " or a "}} " to the "; ".
        match = re.search(rf"(?:^|: |\}}\}} )((?:(?!: |\}}\}} )[^\n;])+); {strerror}",
                          text, re.MULTILINE)
        if match:
            found.append((match.start(), code, match.group(1).strip()))
        elif code in _UNAMBIGUOUS_ERRNOS and (bare := re.search(strerror, text)):
            found.append((bare.start(), code, None))
    if not found:
        return None
    _, code, path = min(found)
    return code, path


def classify_text(text: str, written_roots: Sequence[str] = ()) -> RunFailure | None:
    """The resource failure an error's text states (an exception's message, a logged
    traceback), or None."""
    form = _python_form(text) or _tensorflow_form(text)
    if form is None:
        return None
    code, path = form
    return _errno_failure(code, path, written_roots)


def _own_failure(error: BaseException, written_roots: Sequence[str]) -> RunFailure | None:
    if isinstance(error, OSError) and error.errno in _KNOWN_ERRNOS:
        path = None if error.filename is None else os.fsdecode(error.filename)
        return _errno_failure(error.errno, path, written_roots)
    return classify_text(f"{type(error).__name__}: {error}", written_roots)


def _worker_exit(status: int) -> str:
    """A worker's exit status in words: 137 (a shell's 128 + 9) and -9 are SIGKILL's."""
    number = -status if status < 0 else status - 128 if 128 < status <= 192 else None
    if number is None:
        return f"exit status {status}"
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    hint = " (the out-of-memory killer sends it)" if number == signal.SIGKILL else ""
    return f"killed by {name}{hint}"


def worker_death(texts: Iterable[str]) -> RunFailure | None:
    """A dead worker, if any of ``texts`` reports one; with its exit status when a
    text gives it."""
    texts = list(texts)
    for text in texts:
        if match := _HOST_LOST.search(text):
            return RunFailure(f"a worker host was lost: {match.group(0)}")
        if match := _WORKER_EXIT.search(text):
            return RunFailure(f"{WORKER_DIED}: {_worker_exit(int(match.group(1)))}")
    if any(lost in text for text in texts for lost in _WORKER_LOST):
        return RunFailure(f"{WORKER_DIED} (its connection closed mid-bundle)")
    return None


def error_texts(error: BaseException) -> list[str]:
    """Each exception of ``error``'s chain as ``<type>: <message>``."""
    return [f"{type(e).__name__}: {e}" for e in exception_chain(error)]


def classify(error: BaseException, written_roots: Sequence[str] = (),
             side_texts: Iterable[str] = ()) -> RunFailure | None:
    """Why ``error`` stopped a run, if it is a resource or environment failure.

    Args:
        error: what the run raised.
        written_roots: the folders the run writes (its output and temp dirs): an
            error on a path under them is the output's, else the input's.
        side_texts: what else the run reported (held log records and thread errors):
            a dead worker's exit status is only there.

    Returns:
        The first recognised failure down ``error``'s chain, a dead worker last (a
        worker may die of a full disk); None for any other error.
    """
    for link in exception_chain(error):
        if (failure := _own_failure(link, written_roots)) is not None:
            return failure
    if worker_death(error_texts(error)) is None:
        return None
    return worker_death([*side_texts, *error_texts(error)])


def _is_channel_error(error: BaseException) -> bool:
    return type(error).__module__.startswith("grpc")


def reports_failure(error: BaseException | None, text: str = "") -> bool:
    """True if a log record or thread error (``error`` and/or ``text``) is part of a
    resource failure or of a lost worker: a recognised failure, a gRPC channel error,
    a worker's exit."""
    if error is not None and (
            classify(error) is not None or worker_death(error_texts(error)) is not None
            or any(_is_channel_error(e) for e in exception_chain(error))):
        return True
    return bool(text) and (classify_text(text) is not None
                           or worker_death([text]) is not None)


def format_line(failure: RunFailure, outcome: Outcome) -> str:
    """The one line a stopped run ends with: cause, path, what was published and
    what a rerun reuses."""
    where = f" ({failure.path})" if failure.path else ""
    return f"error: {failure.cause}{where}; {_aftermath(outcome)}."


def format_unexpected(error: BaseException, outcome: Outcome) -> str:
    """The line after the traceback of an error that is not a recognised failure."""
    return (f"error: the run stopped on an unexpected {type(error).__name__} (traceback "
            f"above); {_aftermath(outcome)}.")


def _aftermath(outcome: Outcome) -> str:
    if outcome.publication is Publication.PUBLISHED:
        return f"{outcome.publication.value} ({outcome.output_dir})"
    if outcome.reusable_shards is None:
        rerun = "a rerun will reuse the shards this run finished, if any"
    else:
        rerun = (f"a rerun with the same input and options will reuse "
                 f"{outcome.reusable_shards} finished shard(s)")
    where = f" ({outcome.output_dir})" if outcome.output_dir else ""
    return f"{outcome.publication.value}; {rerun}{where}"


@dataclasses.dataclass(frozen=True)
class ConsoleFlags:
    """The flags the console entry reads itself, before the job parses them."""

    debug: bool
    output_dir: str | None
    tft_temp_dir: str | None

    def written_roots(self) -> list[str]:
        """The folders the run writes: the output dir and the tf.Transform temp dir."""
        return [p for p in (self.output_dir, self.tft_temp_dir) if p]


def console_flags(argv: Sequence[str]) -> ConsoleFlags:
    """``--debug``, ``--output_dir`` and ``--tft_temp_dir`` from ``argv``; every other
    argument is the job's to check."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("--output_dir")
    parser.add_argument("--tft_temp_dir")
    known, _ = parser.parse_known_args(list(argv))
    return ConsoleFlags(known.debug, known.output_dir, known.tft_temp_dir)
