"""GCS objects one request at a time: where the storage seam talks to GCS itself.

Beam's GCS filesystem serves everything ``etl.core.io.storage`` does on ``gs://`` but
these things, which this module does on the google-cloud-storage client Beam's
``gcsio`` makes (Beam's credentials and retries), one client per thread so that
its requests reuse a connection:

* **Top-level entries**: Beam lists every object under a prefix; :func:`entries`
  asks for the names under it up to the next ``/`` only.
* **Small whole files** (images): Beam opens an object with a metadata request
  (``blob.reload()``), reads it in ranged requests, learns its end from one more
  (answered 416), and makes a new client, and so a new connection and a bucket
  lookup, for every call. :func:`read` is one ranged GET, :func:`stat` one
  metadata GET, :func:`write` one upload (a resumable upload takes two).
* **Deletes**: Beam reads the path as a glob (a name with ``[`` would not find
  itself) and deletes through GCS's batch API, which the local GCS server used in
  the tests does not implement (fsouza/fake-gcs-server issue 411). :func:`delete`
  is one DELETE of exactly that name; a job deletes a few objects per shard.
* **Credentials with a local GCS server**: with ``STORAGE_EMULATOR_HOST`` set,
  Beam's client still asks google-auth for default credentials, and when there
  are none it retries for ~30 s, in every process; google-cloud-storage talks to
  an emulator anonymously when given none, so :func:`prepare` settles Beam's
  lookup as "none" before it starts.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
# google-cloud-storage (3.x) looks each bucket up, in the background, once per client
# and bucket, to label OpenTelemetry trace spans, even when tracing is off; Beam makes
# a client per call: ~35 lookups a run. Unless its tracing is on, they are turned off.
_TRACES_ENV = "ENABLE_GCS_PYTHON_CLIENT_OTEL_TRACES"
_NO_TRACE_METADATA_ENV = "DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA"
_per_thread = threading.local()


@functools.cache
def _settle_credentials() -> None:
    from apache_beam.internal.gcp import auth

    with auth._Credentials._credentials_lock:
        auth._Credentials._credentials = None
        auth._Credentials._credentials_init = True


def prepare() -> None:
    """Readies this process for GCS: with a local GCS server, no credential lookup;
    without OpenTelemetry tracing, no bucket lookups for it."""
    if os.environ.get(EMULATOR_ENV):
        _settle_credentials()
    if os.environ.get(_TRACES_ENV, "").strip().lower() not in ("1", "true", "yes", "on"):
        os.environ.setdefault(_NO_TRACE_METADATA_ENV, "true")


def _client() -> Any:
    """This thread's google-cloud-storage client, made by Beam's ``gcsio``."""
    from apache_beam.io.gcp import gcsio

    prepare()
    key = os.environ.get(EMULATOR_ENV)
    cached = getattr(_per_thread, "client", None)
    if cached is None or cached[0] != key:
        cached = _per_thread.client = (key, gcsio.GcsIO().client)
    return cached[1]


def _blob(path: str) -> Any:
    """The blob of ``gs://bucket/name`` on this thread's client."""
    from apache_beam.io.gcp import gcsio

    bucket, name = gcsio.parse_gcs_path(path)
    return _client().bucket(bucket).blob(name)


def _list_one_level(path: str) -> tuple[list[str], list[str]]:
    """The names of the "folders" and of the objects right under the prefix ``path``:
    one listing with a ``/`` delimiter (a request per 1,000 names), not every object
    under it. An object named like the folder itself (a console's) is left out.

    Raises:
        OSError: for a failed request.
    """
    from apache_beam.io.gcp import gcsio
    from google.api_core import exceptions

    bucket, prefix = gcsio.parse_gcs_path(path.rstrip("/") + "/", object_optional=True)
    listing = _client().list_blobs(bucket, prefix=prefix, delimiter="/")
    files = []
    try:
        for page in listing.pages:
            files += [blob.name[len(prefix):] for blob in page if blob.name != prefix]
    except exceptions.GoogleAPICallError as e:
        raise OSError(f"Cannot list {path!r}: {e}") from e
    return sorted(name[len(prefix):].rstrip("/") for name in listing.prefixes), files


def entries(path: str) -> list[str]:
    """Names of everything right under the prefix ``path``, sorted; a folder's with a
    trailing ``/``.

    Raises:
        OSError: for a failed request.
    """
    folders, files = _list_one_level(path)
    return sorted([f"{name}/" for name in folders] + files)


def read(path: str, max_bytes: int | None = None) -> bytes:
    """The object's bytes, or its first ``max_bytes + 1``, in one GET.

    Raises:
        FileNotFoundError: if there is no such object.
        OSError: for any other failed request.
    """
    from google.api_core import exceptions

    try:
        return _blob(path).download_as_bytes(start=0, end=max_bytes, raw_download=True)
    except exceptions.NotFound:
        raise FileNotFoundError(f"No such object: {path!r}") from None
    except exceptions.RequestRangeNotSatisfiable:
        return b""  # An empty object has no byte 0.
    except exceptions.GoogleAPICallError as e:
        raise OSError(f"Cannot read {path!r}: {e}") from e


def write(path: str, data: bytes) -> None:
    """Uploads ``data`` as the object ``path`` in one request (a small file: what
    a resumable upload does in two).

    Raises:
        OSError: for a failed request.
    """
    from google.api_core import exceptions

    try:
        _blob(path).upload_from_string(data, content_type="application/octet-stream")
    except exceptions.GoogleAPICallError as e:
        raise OSError(f"Cannot write {path!r}: {e}") from e


def stat(path: str) -> tuple[int, float] | None:
    """``(size, last update as seconds since the epoch)`` of the object, in one
    metadata GET; None if there is none.

    Raises:
        OSError: for a failed request.
    """
    from google.api_core import exceptions

    blob = _blob(path)
    try:
        found = blob.bucket.get_blob(blob.name)
    except exceptions.GoogleAPICallError as e:
        raise OSError(f"Cannot look up {path!r}: {e}") from e
    return None if found is None else (found.size, found.updated.timestamp())


def delete(path: str) -> None:
    """Deletes exactly the object ``path`` (one DELETE); a missing one is fine.

    Raises:
        OSError: for a failed request.
    """
    from google.api_core import exceptions

    try:
        _blob(path).delete()
    except exceptions.NotFound:
        pass
    except exceptions.GoogleAPICallError as e:
        raise OSError(f"Cannot delete {path!r}: {e}") from e


def _precondition_failed() -> type[Exception]:
    from google.api_core import exceptions

    return exceptions.PreconditionFailed


def create_new(path: str, data: bytes) -> int | None:
    """Uploads ``data`` as the object ``path`` only if there is none (the precondition
    ``ifGenerationMatch=0``: of two writers, exactly one succeeds); returns the new
    object's generation, None if an object was there.

    Raises:
        OSError: for a failed request.
    """
    return write_if_generation(path, data, 0)


def write_if_generation(path: str, data: bytes, generation: int) -> int | None:
    """Uploads ``data`` as ``path`` if its generation is still ``generation`` (0: no
    object); returns the new generation, None if the object changed meanwhile.

    Raises:
        OSError: for a failed request.
    """
    from google.api_core import exceptions

    blob = _blob(path)
    try:
        blob.upload_from_string(data, content_type="application/octet-stream",
                                if_generation_match=generation)
    except (_precondition_failed(), exceptions.NotFound):
        return None
    except exceptions.GoogleAPICallError as e:
        raise OSError(f"Cannot write {path!r}: {e}") from e
    return int(blob.generation)


def read_with_generation(path: str) -> tuple[bytes, int] | None:
    """The object's bytes and the generation they are of; None if there is none.

    Raises:
        OSError: for a failed request.
    """
    from google.api_core import exceptions

    blob = _blob(path)
    try:
        found = blob.bucket.get_blob(blob.name)
        if found is None:
            return None
        return (found.download_as_bytes(raw_download=True,
                                        if_generation_match=found.generation),
                int(found.generation))
    except (exceptions.NotFound, _precondition_failed()):
        return None  # Gone or replaced between the two requests.
    except exceptions.GoogleAPICallError as e:
        raise OSError(f"Cannot read {path!r}: {e}") from e


def delete_if_generation(path: str, generation: int) -> bool:
    """Deletes ``path`` if its generation is still ``generation``; False if it is gone
    or was replaced.

    Raises:
        OSError: for a failed request.
    """
    from google.api_core import exceptions

    try:
        _blob(path).delete(if_generation_match=generation)
    except (exceptions.NotFound, _precondition_failed()):
        return False
    except exceptions.GoogleAPICallError as e:
        raise OSError(f"Cannot delete {path!r}: {e}") from e
    return True
