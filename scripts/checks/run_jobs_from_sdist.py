"""Both jobs run from an installed sdist alone, in worker processes, on a local GCS server.

Step 4 of ``scripts/checks/sdist_install.sh``, which has built the sdist and installed
it into a fresh venv (--venv_python). This script, run by the checkout's own Python:

1. starts a local GCS server (``tests/gcs_server.py``) and uploads a small image folder
   (every fixture format and the known-bad files) and a long-format CSV;
2. runs ``python -m pipelines.images`` and ``python -m pipelines.timeseries`` with the
   fresh venv's interpreter, from a folder outside the checkout, with no PYTHONPATH,
   gs:// input and output, a local --tft_temp_dir and ``--direct_num_workers=2
   --direct_running_mode=multi_processing``: the launcher and every worker process
   (which Beam starts with the same interpreter, folder and environment) import
   ``etl``, ``pipelines`` and ``reader`` from the installed sdist only, as step 3 of
   the shell script checked for this interpreter in this folder;
3. runs the same jobs from the checkout, on the same gs:// input, one worker
   (``in_memory``), and checks that both outputs, downloaded, hold the same files and
   byte-identical shards, ``manifest.json`` and ``errors/rejected.jsonl``: the
   jobs' multi-process determinism check (2 worker processes against one).

Credentials are hermetic: STORAGE_EMULATOR_HOST, NO_GCE_CHECK=true, an empty
CLOUDSDK_CONFIG, no GOOGLE_APPLICATION_CREDENTIALS.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import io
import os
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO_ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
from tests import image_fixtures  # noqa: E402
from tests.gcs_server import GcsServer, download_tree, upload_tree  # noqa: E402
from tests.series_fixtures import write_small_series_csv  # noqa: E402

BUCKET = "sdist"
IMAGE_FLAGS = ("--image_size=16", "--num_shards=2", "--max_error_fraction=0.5")
SERIES_FLAGS = ("--window_size=6", "--shift=2", "--horizon=3")
WORKERS = ("--direct_num_workers=2", "--direct_running_mode=multi_processing")


def _outputs(folder: str) -> tuple[list[str], dict[str, str]]:
    """Every file of a job's output (relative paths), and the sha256 of its shards,
    ``manifest.json`` and ``errors/rejected.jsonl``: what "byte-identical output"
    compares."""
    files, digests = [], {}
    for parent, _, names in os.walk(folder):
        for name in names:
            relative = os.path.relpath(os.path.join(parent, name), folder)
            files.append(relative)
            if relative.endswith(".tfrecord.gz") or relative in (
                    "manifest.json", os.path.join("errors", "rejected.jsonl")):
                with open(os.path.join(folder, relative), "rb") as f:
                    digests[relative] = hashlib.sha256(f.read()).hexdigest()
    return sorted(files), digests


def _run_in_venv(venv_python: str, module: str, args: list[str], env: dict[str, str],
                 cwd: str) -> None:
    proc = subprocess.run([venv_python, "-m", module, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0 or "Wrote dataset" not in proc.stdout:
        sys.exit(f"{module} from the sdist failed:\n{proc.stdout[-2000:]}\n"
                 f"{proc.stderr[-4000:]}")
    print(f"python -m {module} from the sdist, 2 worker processes, on gs://: ok",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv_python", required=True)
    parser.add_argument("--work", required=True, help="a scratch folder")
    args = parser.parse_args()

    work = os.path.join(args.work, "jobs")
    os.makedirs(os.path.join(work, "elsewhere"), exist_ok=True)
    photos = os.path.join(work, "photos")
    image_fixtures.write_image_folder(photos, copies=1)
    image_fixtures.write_bad_files(photos)
    series = os.path.join(work, "series", "rows.csv")
    os.makedirs(os.path.dirname(series))
    write_small_series_csv(series)
    with GcsServer(os.path.join(work, "gcs")) as server:
        os.makedirs(os.path.join(work, "gcloud_config"))
        hermetic = server.hermetic_environment(os.path.join(work, "gcloud_config"))
        env = {name: value for name, value in os.environ.items()
               if name not in ("PYTHONPATH", "GOOGLE_APPLICATION_CREDENTIALS")}
        env.update(hermetic, TF_CPP_MIN_LOG_LEVEL="3")
        os.environ.update(hermetic)
        server.create_bucket(BUCKET)
        upload_tree(server, photos, BUCKET, "photos")
        upload_tree(server, os.path.dirname(series), BUCKET, "series")
        jobs = {
            "images": ("pipelines.images", f"gs://{BUCKET}/photos", IMAGE_FLAGS),
            "timeseries": ("pipelines.timeseries", f"gs://{BUCKET}/series/rows.csv",
                           SERIES_FLAGS),
        }
        for name, (module, remote_input, flags) in jobs.items():
            _run_in_venv(args.venv_python, module, [
                f"--input={remote_input}", f"--output_dir=gs://{BUCKET}/{name}",
                f"--tft_temp_dir={work}/tft_{name}", *flags, *WORKERS],
                env, os.path.join(work, "elsewhere"))
            # The reference, in this process: the checkout's code, one worker.
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(
                    io.StringIO()):
                importlib.import_module(module).run([
                    f"--input={remote_input}",
                    f"--output_dir=gs://{BUCKET}/{name}_reference",
                    f"--tft_temp_dir={work}/tft_{name}_reference", *flags])
            for prefix in (name, f"{name}_reference"):
                download_tree(server, BUCKET, prefix, os.path.join(work, "copies", prefix))
            ours, reference = (_outputs(os.path.join(work, "copies", prefix))
                               for prefix in (name, f"{name}_reference"))
            if "manifest.json" not in reference[1] or ours != reference:
                sys.exit(f"{name}: the output of the sdist's two worker processes differs "
                         f"from the checkout's one-worker output: {ours} != {reference}")
            print(f"{name}: shards, manifest and dead letters byte-identical to the "
                  f"checkout's one-worker run", flush=True)


if __name__ == "__main__":
    main()
