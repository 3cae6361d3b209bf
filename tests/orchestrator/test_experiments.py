"""Experiments in embedded mode: `llmrl sweep` plans, runs and resumes a grid × seeds, its
report aggregates over seeds (checked against scipy directly), `llmrl compare` rebuilds it
from stored runs, `llmrl runs` lists them, and bad specs start nothing."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console
from scipy import stats as scipy_stats

from llmrl.cli import main
from llmrl.common.registry import registry
from llmrl.common.store import RunStore
from llmrl.orchestrator.compare import RunData, build_report, method_name
from llmrl.orchestrator.experiments import parse_spec, plan_experiment, spec_from_arguments
from llmrl.orchestrator.sweep import run_sweep
from llmrl.planners.oracle import OraclePlanner
from llmrl.recipes.config import ConfigError
from llmrl.recipes.results import Results

PLANNER = "test-sweep-oracle"


@registry.register_planner(PLANNER)
class CountingOracle(OraclePlanner):
    """The oracle, counting episodes; a Ctrl-C (KeyboardInterrupt) at episode `stop_at`."""

    episodes_started: ClassVar[int] = 0
    stop_at: ClassVar[int | None] = None

    def reset(self) -> None:
        cls = type(self)
        cls.episodes_started += 1
        if cls.stop_at is not None and cls.episodes_started == cls.stop_at:
            raise KeyboardInterrupt


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def sweep_arguments() -> list[str]:
    """2 configs (episodes 1 and 2) × 3 seeds of `evaluate` on SimpleDoorKey: 9 episodes."""
    return ["env=SimpleDoorKey", f"planner={PLANNER}", "episodes=[1,2]", "seeds=0..2"]


def direct(values: list[float]) -> dict[str, float]:
    """Mean, percentile-bootstrap interval and IQM computed here, straight from scipy."""
    sample = np.array(values)
    interval = scipy_stats.bootstrap(
        (sample,), np.mean, confidence_level=0.95, n_resamples=9999, method="percentile", rng=0
    ).confidence_interval
    return {
        "mean": float(sample.mean()),
        "low": float(interval.low),
        "high": float(interval.high),
        "iqm": float(scipy_stats.trim_mean(sample, 0.25)),
    }


# -- planning ------------------------------------------------------------------------------
def test_a_sweep_is_planned_as_grid_points_times_seeds_with_stable_run_ids():
    spec = spec_from_arguments("evaluate", sweep_arguments())
    assert spec.grid == {"episodes": [1, 2]} and spec.seeds == [0, 1, 2]
    assert spec.config == {"env": "SimpleDoorKey", "planner": PLANNER}
    runs = plan_experiment(spec, "exp")
    assert [(run.point, run.seed) for run in runs] == [
        ({"episodes": e}, s) for e in (1, 2) for s in (0, 1, 2)
    ]
    assert all(run.config["seed"] == run.seed for run in runs)
    assert runs[4].config["episodes"] == 2 and runs[4].config["env"] == "SimpleDoorKey"
    assert len({run.run_id for run in runs}) == 6
    assert [r.run_id for r in plan_experiment(spec, "exp")] == [r.run_id for r in runs]
    assert spec_from_arguments("evaluate", sweep_arguments()).default_name() == (
        spec.default_name()
    )
    assert spec_from_arguments("evaluate", ["seeds=[0,3,7]"]).seeds == [0, 3, 7]
    several = parse_spec(
        {
            "recipe": [
                {"recipe": "evaluate", "config": {"episodes": 1}},
                {"recipe": "evaluate", "config": {"episodes": 3}},
            ],
            "grid": {"max_steps": [10, 20]},
            "seeds": 4,
        }
    )
    planned = plan_experiment(several, "multi")
    assert [run.point for run in planned] == [
        {"episodes": e, "max_steps": m} for e in (1, 3) for m in (10, 20)
    ]
    assert {run.seed for run in planned} == {4}


# -- the embedded sweep ----------------------------------------------------------------------
def test_embedded_sweep_completes_reports_over_seeds_and_resumes(tmp_path: Path, home: Path):
    out = tmp_path / "sweep"
    arguments = ["sweep", "evaluate", *sweep_arguments(), "--out", str(out), "--quiet"]
    CountingOracle.episodes_started, CountingOracle.stop_at = 0, 5
    runner = CliRunner()
    interrupted = runner.invoke(main, arguments)  # Ctrl-C in run 4 (episodes=2, seed 0)
    assert interrupted.exit_code == 130, interrupted.output
    assert "to resume" in interrupted.output
    store = RunStore(out / "run.sqlite")
    (listed,) = store.list_experiments()
    experiment = store.get_experiment(listed.experiment_id)
    run_ids = [run["run_id"] for run in experiment.runs]
    before = [store.get_run(run_id, with_phases=False) for run_id in run_ids]
    assert [run.status if run else None for run in before] == [
        *["completed"] * 3,
        "running",
        None,
        None,
    ]
    assert store.count_episodes(run_ids[3]) == 1
    store.close()

    CountingOracle.episodes_started, CountingOracle.stop_at = 0, None
    resumed = runner.invoke(main, arguments)
    assert resumed.exit_code == 0, resumed.output
    assert resumed.output.count("completed earlier, skipped") == 3
    assert CountingOracle.episodes_started == 1 + 2 + 2  # run 4's missing episode, runs 5-6
    store = RunStore(out / "run.sqlite")
    after = [store.get_run(run_id, with_phases=False) for run_id in run_ids]
    assert all(run.status == "completed" for run in after)
    assert [run.updated for run in after[:3]] == [run.updated for run in before[:3]]  # untouched
    assert [store.count_episodes(run_id) for run_id in run_ids] == [1, 1, 1, 2, 2, 2]
    first_returns = {run_id: store.episodes(run_id)[0].episode_return for run_id in run_ids[3:]}
    store.close()

    report = json.loads((out / "results.json").read_text())
    assert len(report["runs"]) == 6
    assert {run["status"] for run in report["runs"]} == {"completed"}
    assert [c["config"] for c in report["configs"]] == ["episodes=1", "episodes=2"]
    per_seed = {
        run_id: json.loads((out / "runs" / run_id / "results.json").read_text())["rows"][0]
        for run_id in run_ids
    }
    assert len(report["methods"]) == 2
    for method, ids in zip(report["methods"], (run_ids[:3], run_ids[3:]), strict=True):
        assert method["row"] == {"env": "SimpleDoorKey", "planner": PLANNER}
        assert method["seeds"] == [0, 1, 2] and method["run_ids"] == ids
        for metric in ("mean_return", "mean_length", "success_rate"):
            values = [per_seed[run_id][metric] for run_id in ids]
            got = method["metrics"][metric]
            assert got["values"] == values and got["n"] == 3
            for key, value in direct(values).items():
                assert got[key] == pytest.approx(value), (metric, key)
    returns = [per_seed[run_id]["mean_return"] for run_id in run_ids[3:]]
    assert len(set(returns)) > 1  # the seeds differ: the interval is not a point
    ((table),) = report["tables"]
    assert table["columns"][:3] == ["config", "env", "planner"]
    cell = table["rows"][1]["mean_return"]
    want = direct(returns)
    assert cell == f"{want['mean']:.4g} [{want['low']:.4g}, {want['high']:.4g}]"
    markdown = (out / "results.md").read_text()
    assert "| episodes=2 | SimpleDoorKey | test-sweep-oracle | 2 [2, 2] |" in markdown
    for plot in ("curves.png", "headline.png"):
        assert (out / plot).read_bytes()[:4] == b"\x89PNG"
    curve = next(
        band
        for band in report["curves"]["charts/episodic_return"]
        if band["config"] == "episodes=2"
    )
    assert curve["x"] == [1.0, 2.0] and curve["seeds"] == 3
    assert curve["mean"][0] == pytest.approx(np.mean(list(first_returns.values())))

    for run_id in run_ids:  # one TensorBoard root for every run
        link = home / "tensorboard" / run_id
        assert link.is_symlink()
        assert Path(os.readlink(link)) == (out / "runs" / run_id / "tb").resolve()
    printed = runner.invoke(main, ["tensorboard", "--print"])
    assert printed.output.strip() == f"tensorboard --logdir {home / 'tensorboard'}"


def test_compare_and_runs_read_the_stored_runs(tmp_path: Path):
    out = tmp_path / "sweep"
    spec = spec_from_arguments("evaluate", sweep_arguments(), name="cmp")
    CountingOracle.stop_at = None
    original = run_sweep(spec, out, progress=False)
    single = tmp_path / "single"
    runner = CliRunner()
    result = runner.invoke(
        main,
        ["run", "evaluate", "env=SimpleDoorKey", f"planner={PLANNER}", "episodes=3",
         "seed=5", "--out", str(single), "--quiet"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output

    rebuilt = runner.invoke(main, ["compare", str(out), "--out", str(tmp_path / "again")])
    assert rebuilt.exit_code == 0, rebuilt.output
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    assert again["methods"] == original["methods"]  # the same numbers from the same runs

    run_id = original["runs"][0]["run_id"]
    by_ids = runner.invoke(
        main, ["compare", run_id, str(single), "cmp", "--out", str(tmp_path / "mixed")]
    )
    assert by_ids.exit_code == 0, by_ids.output
    mixed = json.loads((tmp_path / "mixed" / "results.json").read_text())
    assert len(mixed["runs"]) == 7  # the experiment's six (one named twice) and the single run
    # configs in the order they were named: the run, the single run, the rest of the sweep
    assert [c["config"] for c in mixed["configs"]] == ["episodes=1", "episodes=3", "episodes=2"]
    assert mixed["configs"][1]["seeds"] == [5]
    assert any("one seed: the interval is the point" in note for note in mixed["notes"])

    unknown = runner.invoke(main, ["compare", "no-such-run", "--out", str(tmp_path / "x")])
    assert unknown.exit_code == 2 and "no-such-run" in unknown.output

    listing = runner.invoke(main, ["runs"])
    assert listing.exit_code == 0, listing.output
    for run in original["runs"]:
        assert run["run_id"] in listing.output  # printed whole: not a terminal
    assert "planner=test-sweep-oracle episodes=3 seed=5" in listing.output
    assert "success_rate=1" in listing.output and "no LLM calls" in listing.output


def test_a_sweep_with_jobs_runs_in_processes_with_the_results_of_one_at_a_time(tmp_path: Path):
    """`--jobs 2`: the same runs, completed, with the same per-run results as one after
    another (spawned workers know only registered plugins: the built-in oracle here)."""
    arguments = ["env=SimpleDoorKey", "planner=oracle", "episodes=[1,2]", "seeds=0..1"]
    one_by_one = run_sweep(
        spec_from_arguments("evaluate", arguments, name="jobs"), tmp_path / "one", progress=False
    )
    runner = CliRunner()
    sweep = ["sweep", "evaluate", *arguments, "--name", "jobs", "--out", str(tmp_path / "two")]
    parallel = runner.invoke(main, [*sweep, "--jobs", "2"])
    assert parallel.exit_code == 0, parallel.output
    assert "4 runs, 2 at once, each in its own process" in parallel.output

    def per_run(out: Path) -> dict[str, dict]:
        store = RunStore(out / "run.sqlite")
        rows = {
            run["run_id"]: store.get_run(run["run_id"]) for run in store.get_experiment("jobs").runs
        }
        store.close()
        assert {row.status for row in rows.values()} == {"completed"}
        return {
            run_id: json.loads((out / "runs" / run_id / "results.json").read_text())["rows"]
            for run_id in rows
        }

    first, second = per_run(tmp_path / "one"), per_run(tmp_path / "two")
    assert first == second
    assert len({json.dumps(rows) for rows in first.values()}) > 1  # the runs differ
    report = json.loads((tmp_path / "two" / "results.json").read_text())
    assert report["methods"] == one_by_one["methods"]

    again = runner.invoke(main, [*sweep, "--jobs", "2"])  # resumed: nothing left to run
    assert again.exit_code == 0, again.output
    assert again.output.count("completed earlier, skipped") == 4
    bad = runner.invoke(main, [*sweep, "--jobs", "0"])
    assert bad.exit_code == 2 and "--jobs" in bad.output


# -- bad input -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        (["nosuchkey=[1,2]"], "grid.nosuchkey: unknown config key"),
        (["nosuchkey=3"], "config.nosuchkey: unknown config key"),
        (["episodes=[]"], "grid.episodes is an empty axis"),
        (["seeds=0..a"], "seeds"),
        (["seeds=4..1"], "seeds '4..1' is an empty range"),
        (["seed=3"], "config.seed: give seeds in `seeds`"),
        (["episodes=[0,2]"], "config.episodes"),
        (["episodes=[1,2,3]", "seeds=0..1"], "LLMRL_MAX_EXPERIMENT_RUNS"),
    ],
)
def test_bad_sweeps_name_the_field_and_start_nothing(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, arguments: list[str], field: str
):
    monkeypatch.setenv("LLMRL_MAX_EXPERIMENT_RUNS", "5")
    out = tmp_path / "never"
    result = CliRunner().invoke(main, ["sweep", "evaluate", *arguments, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert field in " ".join(result.output.split()), result.output
    assert not out.exists() and not (home / "embedded.sqlite").exists()


def test_a_bad_recipe_or_a_different_sweep_of_the_same_name_is_refused(tmp_path: Path):
    with pytest.raises(ConfigError, match="unknown recipe"):
        plan_experiment(parse_spec({"recipe": "nope"}), "x")
    with pytest.raises(ConfigError, match="seeds"):
        parse_spec({"recipe": "evaluate", "seeds": [1, 1]})
    first = spec_from_arguments("evaluate", [f"planner={PLANNER}", "episodes=1"], name="same")
    run_sweep(first, tmp_path, progress=False)
    other = spec_from_arguments("evaluate", [f"planner={PLANNER}", "episodes=2"], name="same")
    with pytest.raises(ConfigError, match="another --name or --out"):
        run_sweep(other, tmp_path, progress=False)


def test_a_named_sweep_grows_by_seeds_and_runs_only_the_new_ones(tmp_path: Path):
    first = spec_from_arguments("evaluate", [f"planner={PLANNER}", "episodes=1"], name="grows")
    run_sweep(first, tmp_path, progress=False)
    CountingOracle.episodes_started, CountingOracle.stop_at = 0, None
    console = Console(record=True, width=200)
    more = spec_from_arguments(
        "evaluate", [f"planner={PLANNER}", "episodes=1", "seeds=[0,1]"], name="grows"
    )
    report = run_sweep(more, tmp_path, console=console, progress=False)
    printed = console.export_text()
    assert "grows by 1 runs" in printed and "completed earlier, skipped" in printed
    assert CountingOracle.episodes_started == 1  # seed 1's episode only
    assert sorted(run["seed"] for run in report["runs"]) == [0, 1]
    store = RunStore(tmp_path / "run.sqlite")
    assert [run["seed"] for run in store.get_experiment("grows").runs] == [0, 1]
    store.close()


def test_rows_are_matched_across_seeds_by_their_text_columns(tmp_path: Path):
    """A when2ask-like table: rows keyed by (task, method), a row with no paper figure."""

    def run(seed: int, planner: str, learned: float, always: float) -> RunData:
        rows = [
            {"task": "KeyInBox", "method": "always", "success_%": always, "paper_%": 100.0},
            {"task": "KeyInBox", "method": "learned", "success_%": learned, "paper_%": None},
        ]
        if seed == 2:
            rows.reverse()  # matched by key, not by position
        config = {"planner": planner, "seed": seed}
        # A recipe this process does not know (a remote plugin's): every numeric column is a
        # headline metric, so the paper column with no values is reported too.
        return RunData(f"{planner}-{seed}", "table-only", config, "completed", Results("t", rows))

    runs = [run(0, "oracle", 90.0, 100.0), run(1, "oracle", 80.0, 100.0)]
    runs += [run(2, "oracle", 70.0, 98.0), run(0, "local", 10.0, 50.0)]
    report = build_report(runs, tmp_path, "keys")
    names = [method_name(method) for method in report["methods"]]
    assert names == [
        "planner=oracle (KeyInBox / always)",
        "planner=oracle (KeyInBox / learned)",
        "planner=local (KeyInBox / always)",
        "planner=local (KeyInBox / learned)",
    ]
    learned = report["methods"][1]["metrics"]["success_%"]
    assert learned["values"] == [90.0, 80.0, 70.0] and learned["mean"] == pytest.approx(80.0)
    assert (
        report["methods"][3]["metrics"]["success_%"]["note"]
        == "one seed: the interval is the point"
    )
    assert report["methods"][1]["metrics"]["paper_%"]["mean"] is None  # no values: null, not NaN
    json.loads((tmp_path / "results.json").read_text(), parse_constant=pytest.fail)
    (table,) = report["tables"]
    assert table["key_columns"] == ["task", "method"]
    assert table["rows"][2] == {
        "config": "planner=local",
        "task": "KeyInBox",
        "method": "always",
        "success_%": "50",
        "paper_%": "100",
    }
    assert table["rows"][3]["paper_%"] == "n/a"


def test_a_sweep_takes_up_its_runs_only_under_the_numerics_they_computed_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A completed run is skipped, an interrupted one resumed, only where the stated numerics
    are the runs' own: else the report would give a run made under others as this one."""
    spec = spec_from_arguments("evaluate", [f"planner={PLANNER}", "episodes=1"], name="same")
    monkeypatch.setenv("LLMRL_PRECISION", "float32")
    run_sweep(spec, tmp_path, progress=False)
    monkeypatch.setenv("LLMRL_PRECISION", "bfloat16")
    with pytest.raises(ConfigError) as refused:
        run_sweep(spec, tmp_path, progress=False)
    assert "LLMRL_PRECISION float32 there, bfloat16 here" in str(refused.value)
    assert "LLMRL_PRECISION=float32 llmrl sweep" in str(refused.value)
    # a run stored before runs recorded their numerics: its results' provenance says
    with sqlite3.connect(tmp_path / "run.sqlite") as conn:
        conn.execute("UPDATE runs SET numerics = '{}'")
    with pytest.raises(ConfigError, match="LLMRL_PRECISION float32 there"):
        run_sweep(spec, tmp_path, progress=False)
    monkeypatch.setenv("LLMRL_PRECISION", "float32")
    console = Console(record=True, width=200)
    run_sweep(spec, tmp_path, console=console, progress=False)
    assert "completed earlier, skipped" in console.export_text()
