"""The benchmark harness (``scripts/benchmarks``): every benchmark module declares itself,
``--list`` names them, and a toy benchmark runs through the entry point side by side.

No benchmark of the project runs here (each runs jobs for minutes); the toy stands for
them, in a package of its own that imports the harness as the benchmarks do.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import textwrap

import pytest

from scripts.benchmarks import harness

TOY = '''
import argparse

from scripts.benchmarks.harness import Benchmark, side_by_side, write_rates

BENCHMARK = Benchmark(
    name="toy",
    measures="sum() of a range against a Python loop",
    quick=("--rounds", "2", "--n", "1000", "--out", "{quick_dir}/toy.json"),
)


def loop(n):
    total = 0
    for i in range(n):
        total += i
    return {"total": total}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    samples = side_by_side({"job": lambda: {"total": sum(range(args.n))},
                            "reference": lambda: loop(args.n)},
                           args.rounds, max_foreign=float("inf"))
    write_rates(args.out, f"n{args.n}", "toy", samples, args.n, "additions / s")


if __name__ == "__main__":
    main()
'''


TOY_PACKAGE = "toy_benchmarks"


@pytest.fixture
def toy_folder(tmp_path, monkeypatch):
    """The package ``toy_benchmarks``, importable, holding the toy benchmark."""
    folder = tmp_path / TOY_PACKAGE
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "toy.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield folder
    for name in [m for m in sys.modules if m.split(".")[0] == TOY_PACKAGE]:
        del sys.modules[name]


def test_every_benchmark_module_declares_itself_with_a_quick_run_outside_the_docs():
    modules = {name[:-3] for name in os.listdir(harness.FOLDER)
               if name.endswith(".py") and not name.startswith("_")}
    benchmarks = harness.declared()
    assert set(benchmarks) == modules - set(harness.HELPERS)
    assert len(benchmarks) >= 12
    for name, benchmark in benchmarks.items():
        assert benchmark.measures, name
        quick = list(benchmark.quick)
        if "--out" in quick:
            assert quick[quick.index("--out") + 1].startswith("{quick_dir}/"), name
        else:  # Its own --quick, which writes under its --work_dir.
            assert "--quick" in quick, name
        assert "docs/benchmarks" not in " ".join(quick), name


def test_list_names_every_benchmark(capsys):
    harness.main(["--list"])
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == sorted(harness.declared())


def test_the_entry_point_runs_a_toy_benchmark_side_by_side(toy_folder, tmp_path, capsys):
    harness.main(["--list"], package=TOY_PACKAGE)
    assert capsys.readouterr().out.split()[0] == "toy"
    path_before, argv_before = list(sys.path), list(sys.argv)
    out = tmp_path / "toy.json"
    # --quick's own --out is overridden by the one given after it; the second run, on
    # another input, is another setting of the same results file.
    harness.main(["toy", "--quick", "--out", str(out)], package=TOY_PACKAGE)
    harness.main(["toy", "--quick", "--out", str(out), "--n", "500"], package=TOY_PACKAGE)
    assert (sys.path, sys.argv) == (path_before, argv_before)
    content = json.loads(out.read_text())
    assert content["benchmark"] == "toy" and set(content["settings"]) == {"n1000", "n500"}
    assert (tmp_path / "toy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(os.listdir(tmp_path)) == ["toy.json", "toy.png", TOY_PACKAGE]
    for setting, n in (("n1000", 1000), ("n500", 500)):
        result = content["settings"][setting]
        assert set(result["samples"]) == {"job", "reference"}
        for name, runs in result["samples"].items():
            assert len(runs) == 2  # --quick: two rounds
            assert all(run["total"] == sum(range(n)) for run in runs)
            rates = [n / run["seconds"] for run in runs]
            assert result["median"][name] == pytest.approx(statistics.median(rates))
            assert result["best"][name] == pytest.approx(max(rates))
        assert result["machine"]["cpu_cores"] == os.cpu_count()
        assert set(result["code"]) == {"commit", "uncommitted_changes"}


def test_a_results_file_of_another_shape_is_not_overwritten(tmp_path):
    path = tmp_path / "toy.json"
    path.write_text(json.dumps({"median": {"job": 1.0}}))
    with pytest.raises(ValueError, match="is not a benchmark results file"):
        harness.write_result(str(path), "n1000", {"median": {"job": 2.0}}, harness.Chart(
            lambda setting, result: pytest.fail("drawn"), unit="s", value_format=".1f"))
    assert json.loads(path.read_text()) == {"median": {"job": 1.0}}
    assert not (tmp_path / "toy.png").exists()


def test_the_docs_hold_one_results_file_and_one_chart_per_benchmark():
    names = set(harness.declared())
    files = os.listdir(harness.RESULTS_DIR)
    assert {f[:-5] for f in files if f.endswith(".json")} == names
    assert {f[:-4] for f in files if f.endswith(".png")} == names
    assert all(f.endswith((".json", ".png")) for f in files), files
    for name in names:
        settings = harness.read_settings(harness.result_path(name))
        assert settings and all(isinstance(r, dict) and r for r in settings.values()), name


def test_an_unknown_benchmark_names_the_ones_there_are(toy_folder):
    with pytest.raises(SystemExit, match="No benchmark 'tyo'; there are: toy"):
        harness.main(["tyo"], package=TOY_PACKAGE)


def test_a_module_that_declares_no_benchmark_is_an_error(toy_folder):
    (toy_folder / "stray.py").write_text(textwrap.dedent("""
        def main():
            pass
    """))
    with pytest.raises(ValueError, match=r"stray\.py: no top-level BENCHMARK"):
        harness.declared(str(toy_folder))
    (toy_folder / "stray.py").write_text('from scripts.benchmarks.harness import Benchmark\n'
                                         'BENCHMARK = Benchmark(name="toy", measures="x")\n')
    with pytest.raises(ValueError, match="name it 'stray'"):
        harness.declared(str(toy_folder))


def test_spread_gives_the_median_and_the_best_and_worst_round_by_direction():
    times = [3.0, 1.0, 2.0, 4.0]
    assert harness.spread(times, higher_is_better=False) == {
        "median": 2.5, "best": 1.0, "worst": 4.0}
    assert harness.spread(times, higher_is_better=True) == {
        "median": 2.5, "best": 4.0, "worst": 1.0}


def test_the_peak_memory_of_a_command_is_its_own_largest_process(tmp_path):
    # A child holding 200 MiB of touched memory: its peak, not the caller's (whose
    # own RSS, with pytest and NumPy loaded, is far from both numbers).
    allocate = "b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096])"
    log, result = str(tmp_path / "log"), str(tmp_path / "result.json")
    subprocess.run(harness.peak_rss_command(
        [sys.executable, "-c", allocate + "; print('done')"], log, result), check=True)
    measured = harness.read_peak_rss(result)
    assert measured["rc"] == 0 and open(log).read() == "done\n"
    assert 200 <= measured["peak_rss_mib"] < 260
    small = str(tmp_path / "small.json")
    subprocess.run(harness.peak_rss_command([sys.executable, "-c", "pass"], log, small),
                   check=True)
    assert harness.read_peak_rss(small)["peak_rss_mib"] < 100


def test_rounds_interleave_every_variant_the_first_rotating():
    assert [harness.rotated(["a", "b", "c"], r) for r in range(4)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert list(harness.interleaved(["a", "b"], 2)) == [(0, "a"), (0, "b"), (1, "b"), (1, "a")]
