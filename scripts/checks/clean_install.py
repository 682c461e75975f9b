"""The Python half of ``scripts/checks/clean_install.sh``: empty venvs filled from a pip
wheel cache, and both jobs run from the installed wheel on a local GCS server.

    python scripts/checks/clean_install.py venv [--no_compile] VENV PIP_INSTALL_ARGUMENTS...
    python scripts/checks/clean_install.py jobs --venv_python PYTHON --work DIR

``venv`` makes VENV with Python 3.11's own ``venv`` module (no system site-packages,
nothing of ``.venv``: its ``sys.path`` is checked, before and after the install) and
pip-installs the arguments into it from the wheel cache ``.clusters/cache/pip/`` alone
(``--no-index``); only when that fails does it ``pip wheel`` them from the package index
into the cache and install again, offline. ``scripts/checks/tf_free_reader.py`` makes
its venv the same way.

``jobs``, run by ``.venv``'s Python (the suite's environment):

1. starts a local GCS server (``tests/gcs_server.py``) and uploads a small image folder
   (every fixture format and the known-bad files) and a long-format CSV;
2. runs ``python -m pipelines.images`` and ``python -m pipelines.timeseries`` with the
   clean venv's interpreter, from a folder outside the checkout, no PYTHONPATH, gs://
   input and output and the jobs' default flags (statistics and report included),
   the image job on two worker processes (``--direct_num_workers=2
   --direct_running_mode=multi_processing``: every step unpickled in processes that
   import only the installed packages, as Dataflow's workers do; the time-series job's
   multi-process run is ``tests/pipelines/test_timeseries.py``'s); each must exit 0,
   print ``Wrote dataset`` and print no gcsfs warning and no missing-credentials line;
3. runs the same jobs in this process (the checkout through ``.venv``, one worker) on
   the same files on local disk, and checks the two outputs hold the same files and
   byte-identical shards, manifest, dead letters, statistics, duplicate report and key
   index (``tests/job_runs.output_digests``).

Credentials are hermetic: STORAGE_EMULATOR_HOST, NO_GCE_CHECK=true, an empty
CLOUDSDK_CONFIG, no GOOGLE_APPLICATION_CREDENTIALS.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import hashlib
import importlib
import io
import json
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PIP_CACHE = os.path.join(REPO, ".clusters", "cache", "pip")
# What building a source tree (READER.md's `pip install .`) needs offline: pip's
# isolated build environment installs these from the cache too.
BUILD_REQUIRES = ("setuptools", "wheel")
PROJECT_WHEELS = "tfrecord_etl-*.whl"

BUCKET = "clean-install"
IMAGE_FLAGS = ("--image_size=16", "--num_shards=2", "--max_error_fraction=0.5")
SERIES_FLAGS = ("--window_size=6", "--shift=2", "--horizon=3")
TWO_PROCESSES = ("--direct_num_workers=2", "--direct_running_mode=multi_processing")
# What a job must not print: gcsfs (not installed by the wheel) or google-auth looking
# for credentials means a read or write left the storage seam (etl/core/io/storage.py).
FORBIDDEN_OUTPUT = ("WARNING:gcsfs", "default credentials were not found")

SYS_PATH = ("import json, sys; print(json.dumps({'path': sys.path, "
            "'base': sys.base_prefix, 'prefix': sys.prefix}))")


def _log(message: str) -> None:
    print(f"[clean_install] {message}", flush=True)


def _pip_environment() -> dict[str, str]:
    """This environment without pip settings that would add packages from elsewhere."""
    return {name: value for name, value in os.environ.items()
            if name not in ("PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_EXTRA_INDEX_URL",
                            "PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE")}


def _pip(python: str, args: list[str], cwd: str | None) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-m", "pip", *args], cwd=cwd, env=_pip_environment(),
                          capture_output=True, text=True)


def check_isolated(python: str) -> None:
    """Exits unless ``python``'s ``sys.path`` is its own venv and the standard library
    only: no system site-packages, no user site, no .pth onto ``.venv``, no checkout."""
    done = subprocess.run([python, "-c", SYS_PATH], capture_output=True, text=True,
                          check=True, env=_pip_environment())
    facts = json.loads(done.stdout)
    prefix, base = (os.path.realpath(facts[k]) + os.sep for k in ("prefix", "base"))
    foreign = [p for p in facts["path"] if p and not (
        os.path.realpath(p).startswith(prefix)
        or (os.path.realpath(p).startswith(base)
            and not any(d in p for d in ("site-packages", "dist-packages"))))]
    if foreign or prefix == base:
        sys.exit(f"{python} is not an empty venv: sys.path has {foreign} "
                 f"(prefix {prefix}, base {base})")


def empty_venv(path: str) -> str:
    """A new venv at ``path`` from Python 3.11's own ``venv`` module (``$PYTHON311``, else
    ``python3.11`` on PATH), checked to see nothing but itself and the standard library;
    returns its interpreter."""
    base = os.environ.get("PYTHON311") or shutil.which("python3.11")
    if not base:
        sys.exit("no python3.11 on PATH: set PYTHON311=/path/to/python3.11")
    subprocess.run([base, "-m", "venv", "--clear", path], check=True,
                   env=_pip_environment())
    python = os.path.join(path, "bin", "python")
    check_isolated(python)
    return python


def pip_install_cached(python: str, arguments: list[str], cwd: str | None = None,
                       compile_bytecode: bool = True) -> None:
    """``pip install ARGUMENTS`` into ``python``'s venv from the wheel cache alone; when
    the cache lacks something, ``pip wheel`` fills it from the package index first.
    ``compile_bytecode=False`` leaves the .pyc files to the first imports: compiling
    every module of TensorFlow and Beam, imported or not, is 40 % of the install's time."""
    os.makedirs(PIP_CACHE, exist_ok=True)
    offline = ["install", "--no-index", "--find-links", PIP_CACHE,
               *([] if compile_bytecode else ["--no-compile"]), *arguments]
    started = time.monotonic()
    done = _pip(python, offline, cwd)
    if done.returncode == 0:
        _log(f"pip install, offline from {PIP_CACHE}: {time.monotonic() - started:.1f} s")
        return
    _log(f"the cache lacks a package ({_last_error(done)}); filling it from the index")
    started = time.monotonic()
    for fill in (["wheel", "--wheel-dir", PIP_CACHE, "--find-links", PIP_CACHE,
                  *arguments],
                 ["download", "--dest", PIP_CACHE, "--only-binary=:all:",
                  *BUILD_REQUIRES]):
        done = _pip(python, fill, cwd)
        if done.returncode != 0:
            sys.exit(f"pip {' '.join(fill)} failed:\n{done.stdout[-3000:]}\n"
                     f"{done.stderr[-3000:]}")
    for project_wheel in glob.glob(os.path.join(PIP_CACHE, PROJECT_WHEELS)):
        os.remove(project_wheel)  # Ours is built fresh each time, never cached.
    _log(f"pip wheel into the cache: {time.monotonic() - started:.1f} s")
    started = time.monotonic()
    done = _pip(python, offline, cwd)
    if done.returncode != 0:
        sys.exit(f"pip install from the filled cache failed:\n{done.stdout[-3000:]}\n"
                 f"{done.stderr[-3000:]}")
    _log(f"pip install, offline from {PIP_CACHE}: {time.monotonic() - started:.1f} s")


def _last_error(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
    return lines[-1] if lines else f"exit status {done.returncode}"


def _start_in_venv(venv_python: str, module: str, args: list[str], env: dict[str, str],
                   cwd: str, log: str) -> subprocess.Popen:
    """``python -m module args`` from the clean venv, its output going to ``log``."""
    with open(log, "w") as out:
        return subprocess.Popen([venv_python, "-m", module, *args], cwd=cwd, env=env,
                                stdout=out, stderr=subprocess.STDOUT, text=True)


def _check_venv_run(module: str, proc: subprocess.Popen, log: str, started: float) -> None:
    """Exits unless the job exited 0, wrote its dataset and printed nothing forbidden."""
    returncode = proc.wait(timeout=900)
    with open(log) as f:
        output = f.read()
    forbidden = [line for line in output.splitlines()
                 if any(text in line for text in FORBIDDEN_OUTPUT)]
    if returncode != 0 or "Wrote dataset" not in output or forbidden:
        sys.exit(f"python -m {module} from the clean venv failed (exit status "
                 f"{returncode}; lines it must not print: {forbidden}):\n{output[-8000:]}")
    _log(f"python -m {module} from the clean venv, gs:// → gs://: exit status 0, "
         f"{time.monotonic() - started:.1f} s")


def _run_reference(module: str, args: list[str]) -> None:
    """The job in this process: the checkout through ``.venv``, one worker."""
    started = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(
            io.StringIO()):
        importlib.import_module(module).run(args)
    _log(f"python -m {module} from .venv on local disk: {time.monotonic() - started:.1f} s")


def _compare(name: str, ours: str, reference: str, local_input: str,
             remote_input: str) -> None:
    """Exits unless both outputs hold the same files and ``output_digests`` agree; a
    dead letter names its input file (``"source"``), so the reference's are compared
    with its local input path read as the gs:// one."""
    from reader.format import contract
    from tests.job_runs import files_under, output_digests

    digests = [output_digests(folder) for folder in (ours, reference)]
    rejected = os.path.join(contract.ERRORS_DIRNAME, contract.REJECTED_FILENAME)
    with open(os.path.join(reference, rejected), "rb") as f:
        # '"<local input>' (a path, or a path's prefix) → '"<remote input>'.
        as_remote = f.read().replace(json.dumps(local_input)[:-1].encode(),
                                     json.dumps(remote_input)[:-1].encode())
    digests[1][rejected] = hashlib.sha256(as_remote).hexdigest()
    files = [files_under(folder) for folder in (ours, reference)]
    if "manifest.json" not in digests[1] or digests[0] != digests[1] or files[0] != files[1]:
        sys.exit(f"{name}: the clean venv's gs:// output differs from .venv's on disk:\n"
                 f"digests {digests[0]}\n!= {digests[1]}\nfiles {files[0]}\n!= {files[1]}")
    if "report/index.html" not in files[0]:
        sys.exit(f"{name}: no report/index.html in {files[0]}")
    _log(f"{name}: the same {len(files[0])} files, of which the {len(digests[0])} "
         f"output_digests reads (shards, manifest, dead letters, statistics, indexes) "
         f"byte-identical to .venv's one-worker run on disk")


def run_jobs(venv_python: str, work: str) -> None:
    """Steps 1-3 of the module docstring, in ``work``."""
    sys.path.insert(0, REPO)
    from tests import image_fixtures
    from tests.gcs_server import GcsServer, download_tree, upload_tree
    from tests.series_fixtures import write_small_series_csv

    work = os.path.join(work, "jobs")
    os.makedirs(os.path.join(work, "elsewhere"), exist_ok=True)
    photos = os.path.join(work, "photos")
    image_fixtures.write_image_folder(photos, copies=1)
    image_fixtures.write_bad_files(photos)
    series = os.path.join(work, "series", "rows.csv")
    os.makedirs(os.path.dirname(series))
    write_small_series_csv(series)
    jobs = {
        "images": ("pipelines.images", photos, "photos", IMAGE_FLAGS, TWO_PROCESSES),
        "timeseries": ("pipelines.timeseries", series, "series/rows.csv", SERIES_FLAGS, ()),
    }
    with GcsServer(os.path.join(work, "gcs")) as server:
        os.makedirs(os.path.join(work, "gcloud_config"))
        hermetic = server.hermetic_environment(os.path.join(work, "gcloud_config"))
        env = {name: value for name, value in os.environ.items()
               if name not in ("PYTHONPATH", "GOOGLE_APPLICATION_CREDENTIALS")}
        env.update(hermetic, TF_CPP_MIN_LOG_LEVEL="3")
        server.create_bucket(BUCKET)
        upload_tree(server, photos, BUCKET, "photos")
        upload_tree(server, os.path.dirname(series), BUCKET, "series")
        for name, (module, local_input, remote_input, flags, runner) in jobs.items():
            # The reference runs in this process while the clean venv's job runs.
            started, log = time.monotonic(), os.path.join(work, f"{name}.log")
            running = _start_in_venv(venv_python, module, [
                f"--input=gs://{BUCKET}/{remote_input}", f"--output_dir=gs://{BUCKET}/{name}",
                f"--tft_temp_dir={work}/tft_{name}", *flags, *runner],
                env, os.path.join(work, "elsewhere"), log)
            reference = os.path.join(work, "reference", name)
            _run_reference(module, [f"--input={local_input}", f"--output_dir={reference}",
                                    *flags])
            _check_venv_run(module, running, log, started)
            ours = os.path.join(work, "copies", name)
            download_tree(server, BUCKET, name, ours)
            _compare(name, ours, reference, local_input, f"gs://{BUCKET}/{remote_input}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    venv = commands.add_parser("venv", help="an empty venv, then pip install from the cache")
    venv.add_argument("path")
    venv.add_argument("--no_compile", action="store_true", help="pip install --no-compile")
    venv.add_argument("pip_arguments", nargs=argparse.REMAINDER)
    jobs = commands.add_parser("jobs", help="both jobs from the clean venv on gs://")
    jobs.add_argument("--venv_python", required=True)
    jobs.add_argument("--work", required=True, help="a scratch folder")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if args.command == "venv":
        python = empty_venv(args.path)
        pip_install_cached(python, args.pip_arguments, compile_bytecode=not args.no_compile)
        check_isolated(python)
    else:
        run_jobs(args.venv_python, args.work)


if __name__ == "__main__":
    main()
