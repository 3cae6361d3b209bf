"""evaluation/when2ask.py refuses a bad step cap or noise list by the option's name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "evaluation" / "when2ask.py"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-steps", "0"], "argument --max-steps: expected a positive integer, got '0'"),
        (["--max-steps", "x"], "argument --max-steps: expected a positive integer, got 'x'"),
        (["--noise-mode", "sometimes"], "argument --noise-mode: invalid choice"),
        (["--noise", "0.1,2"], "--noise: expected comma-separated numbers in [0, 1]"),
        (["--seeds", "0", "-1"], "argument --seeds: expected an integer >= 0, got '-1'"),
        (["--noise", "0.1", "--name", "a b"], "invalid experiment: name: String should match"),
        (["--noise", "0.1", "--envs", "Maze"], "unknown task(s) ['Maze']"),
    ],
)
def test_bad_options_are_refused_by_name(args, message):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert message in done.stderr


def test_seeds_need_a_noise_sweep():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--seeds", "0", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "--seeds repeats a noise sweep" in done.stderr


def _script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("when2ask_evaluation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(seed, task, method, success, queries):
    return {"seed": seed, "p": 0.2, "task": task, "method": method, "success_%": success,
            "queries/ep": queries, "steps/ep": 18.0, "return_penalised": 0.5}  # fmt: skip


def test_the_summary_over_seeds_takes_the_gain_seed_by_seed():
    script = _script()
    rows = []
    for seed, (learned, forced) in enumerate([(86.0, 80.0), (82.0, 78.0)]):
        for task in ("KeyInBox", "RandomBoxKey"):
            rows += [
                _row(seed, task, "learned", learned, 3.0),
                _row(seed, task, "always", 60.0, 20.0),
                _row(seed, task, "forced-only", forced, 1.5),
                _row(seed, task, "news-or-skill-end", 50.0, 7.0),
            ]
    summary = script.summarise_seeds(rows)
    assert [entry["task"] for entry in summary] == ["KeyInBox", "RandomBoxKey"]
    gain = summary[0]["gain"]
    assert gain["per_seed"] == [6.0, 4.0] and gain["mean"] == 5.0
    assert summary[0]["learned"]["success_%"]["mean"] == 84.0
    assert script.overall_gain(summary) == 5.0  # (6 + 4) per task, both tasks alike
    assert "met (p=0.2: KeyInBox, RandomBoxKey)" in script.seeds_verdict(summary)
    assert "| 0.2 | KeyInBox | 84 [82, 86] / 3.00 |" in script.seeds_table(summary)
    # The same gains bought with more queries than the paper's rule do not count.
    costly = [{**r, "queries/ep": 9.0} if r["method"] == "learned" else r for r in rows]
    assert ": NOT met" in script.seeds_verdict(script.summarise_seeds(costly))
    # One task short of the threshold on average: not met.
    short = [
        {**r, "success_%": 81.0} if r["method"] == "learned" and r["task"] == "RandomBoxKey"
        else r
        for r in rows
    ]  # fmt: skip
    assert ": NOT met" in script.seeds_verdict(script.summarise_seeds(short))
    # A p that only one seed ran (merged sweeps): summarised over that seed alone.
    one_seed = [{**r, "p": 0.3} for r in rows if r["seed"] == 1 and r["task"] == "KeyInBox"]
    uneven = script.summarise_seeds(rows + one_seed)
    assert [(e["p"], e["seeds"]) for e in uneven] == [(0.2, [0, 1]), (0.2, [0, 1]), (0.3, [1])]
    assert uneven[2]["gain"]["per_seed"] == [4.0]


def test_a_sweep_over_seeds_reads_finished_runs_and_grows_by_seeds(tmp_path, monkeypatch, capsys):
    script = _script()
    argv = [
        "when2ask.py", "--noise", "0.5", "--seeds", "0", "1", "--envs", "SimpleDoorKey",
        "--train-steps", "64", "--n-steps", "16", "--episodes", "2", "--max-steps", "8",
        "--out", str(tmp_path),
    ]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    assert script.main() == 0
    summary = json.loads((tmp_path / "noise_sweep_seeds.json").read_text())
    assert {entry["task"] for entry in summary} == {"SimpleDoorKey"}
    assert summary[0]["seeds"] == [0, 1] and summary[0]["gain"]["n"] == 2
    assert (tmp_path / "noise_sweep_seeds.png").stat().st_size > 0
    for seed in (0, 1):
        assert (tmp_path / f"seed{seed}" / "noise_sweep.md").exists()
    capsys.readouterr()
    assert script.main() == 0  # the same settings again: every run is read, none rerun
    assert capsys.readouterr().out.count("completed earlier, skipped") == 2
    # One seed more: the experiment grows, the two finished runs are read, one runs.
    monkeypatch.setattr(sys, "argv", [*argv[:6], "2", *argv[6:]])
    assert script.main() == 0
    printed = capsys.readouterr().out
    assert printed.count("completed earlier, skipped") == 2 and "grows by 1 runs" in printed
    summary = json.loads((tmp_path / "noise_sweep_seeds.json").read_text())
    assert summary[0]["seeds"] == [0, 1, 2] and summary[0]["gain"]["n"] == 3
    # A single-seed sweep in the same dir reads its run and writes its table into --out.
    monkeypatch.setattr(sys, "argv", [a for a in argv if a not in ("--seeds", "0", "1")])
    assert script.main() == 0
    assert "completed earlier, skipped" in capsys.readouterr().out
    assert "seed 0, fresh errors" in (tmp_path / "noise_sweep.md").read_text()


def test_seeds_run_into_another_directory_are_merged_into_the_summary(
    tmp_path, monkeypatch, capsys
):
    script = _script()
    settings = [
        "--noise", "0.5", "--envs", "SimpleDoorKey", "--train-steps", "64", "--n-steps", "16",
        "--episodes", "2", "--max-steps", "8",
    ]  # fmt: skip
    first, second = tmp_path / "first", tmp_path / "second"
    for seed, out in ((0, first), (1, second)):  # as two processes would
        monkeypatch.setattr(sys, "argv", ["w", *settings, "--seeds", str(seed), "--out", str(out)])
        assert script.main() == 0
    alone = json.loads((second / "seed1" / "noise_sweep.json").read_text())
    capsys.readouterr()
    merged_argv = [*settings, "--seeds", "0", "--out", str(first), "--merge", str(second)]
    monkeypatch.setattr(sys, "argv", ["w", *merged_argv, "--merge", str(tmp_path / "none")])
    assert script.main() == 0
    printed = capsys.readouterr().out
    assert "completed earlier, skipped" in printed and "seeds 0, 1" in printed
    assert f"no run store in {tmp_path / 'none'}" in printed
    assert not (tmp_path / "none").exists()
    summary = json.loads((first / "noise_sweep_seeds.json").read_text())
    assert summary[0]["seeds"] == [0, 1] and summary[0]["gain"]["n"] == 2
    assert json.loads((first / "seed1" / "noise_sweep.json").read_text()) == alone
    monkeypatch.setattr(sys, "argv", ["w", *settings, "--merge", str(second)])
    with pytest.raises(SystemExit):
        script.main()
    assert "--merge adds seeds to a summary over seeds" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["w", "--jobs", "2"])
    with pytest.raises(SystemExit):
        script.main()
    assert "--jobs runs a noise sweep's runs at once" in capsys.readouterr().err
