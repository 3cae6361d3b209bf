"""Embedded mode: `llmrl run evaluate` on SimpleDoorKey with the oracle planner, results files,
config errors, and resuming an interrupted run without replaying stored episodes."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from click.testing import CliRunner

from llmrl.cli import main
from llmrl.common.registry import registry
from llmrl.common.store import RunStore
from llmrl.orchestrator.embedded import run_embedded
from llmrl.planners.base import Plan
from llmrl.planners.oracle import OraclePlanner
from llmrl.recipes.config import ConfigError


@registry.register_planner("test-interrupting-oracle")
class InterruptingOracle(OraclePlanner):
    """The oracle, counting episodes; raises KeyboardInterrupt (a Ctrl-C) at episode `stop_at`."""

    episodes_started: ClassVar[int] = 0
    stop_at: ClassVar[int | None] = None

    def reset(self) -> None:
        cls = type(self)
        cls.episodes_started += 1
        if cls.stop_at is not None and cls.episodes_started == cls.stop_at:
            raise KeyboardInterrupt

    def plan(self, observation: dict[str, Any], t: int = 0) -> Plan:
        return super().plan(observation, t)


@registry.register_planner("test-failing-oracle")
class FailingOracle(OraclePlanner):
    """An oracle whose every query fails, as a phase's bug or a bad combination of keys does."""

    def plan(self, observation: dict[str, Any], t: int = 0) -> Plan:
        raise ValueError("the planner broke on purpose")


def test_llmrl_run_evaluate_simpledoorkey_oracle_writes_results(tmp_path: Path):
    out = tmp_path / "demo"
    result = CliRunner().invoke(
        main,
        ["run", "evaluate", "env=SimpleDoorKey", "planner=oracle", "episodes=6", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "success_rate" in result.output  # the table is printed
    results = json.loads((out / "results.json").read_text())
    (row,) = results["rows"]
    assert row["env"] == "SimpleDoorKey" and row["planner"] == "oracle"
    assert row["episodes"] == 6
    assert row["success_rate"] == 1.0  # the oracle solves every seed
    assert 0 < row["mean_return"] <= 1 and row["mean_length"] > 1
    assert row["llm_calls_per_episode"] == 0
    assert "| SimpleDoorKey | oracle | 6 | 1 |" in (out / "results.md").read_text()
    assert (out / "evaluate.png").read_bytes()[:4] == b"\x89PNG"
    lines = (out / "episodes" / "evaluate.jsonl").read_text().splitlines()
    assert [json.loads(line)["episode_id"] for line in lines] == [f"evaluate/{i}" for i in range(6)]
    assert any(path.name.startswith("events.out.tfevents") for path in (out / "tb").iterdir())
    arrays = np.load(out / "episodes" / "evaluate.npz")
    assert arrays["returns"].shape == (6,) and arrays["success"].all()
    assert arrays["offsets"][-1] == len(arrays["rewards"]) == arrays["lengths"].sum()
    assert arrays["rewards"].sum() == pytest.approx(arrays["returns"].sum())


def test_bad_configs_name_the_problem(tmp_path: Path):
    with pytest.raises(ConfigError, match="episodez"):
        run_embedded("evaluate", {"episodez": 3}, out_dir=tmp_path, progress=False)
    with pytest.raises(ConfigError, match=r"unknown recipe 'nope'.*evaluate"):
        run_embedded("nope", {}, out_dir=tmp_path, progress=False)
    with pytest.raises(ConfigError, match="unknown planner 'psychic'"):
        run_embedded("evaluate", {"planner": "psychic"}, out_dir=tmp_path, progress=False)
    # the oracle reads a privileged plan that CLEVR-Robot does not give: refused before a step
    with pytest.raises(ConfigError, match=r"planner: 'oracle' reads the env's oracle_plan.*"):
        run_embedded("evaluate", {"env": "ClevrRobot"}, out_dir=tmp_path, progress=False)
    # BabyAI-Text gives it only with its bot (expert=true)
    with pytest.raises(ConfigError, match="does not give"):
        run_embedded("evaluate", {"env": "BabyAIText-GoToLocalS5N2"}, out_dir=tmp_path)
    config = {"env": "BabyAIText-GoToLocalS5N2", "env_kwargs": {"expert": True}, "episodes": 1}
    assert run_embedded("evaluate", config, out_dir=tmp_path / "bot", progress=False)
    result = CliRunner().invoke(main, ["run", "evaluate", "episodes=lots", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "config.episodes" in result.output
    assert "Traceback" not in result.output


def test_a_failed_run_says_why_without_a_traceback(tmp_path: Path):
    args = ["run", "evaluate", "planner=test-failing-oracle", "episodes=1", "--out", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert "failed" in result.output and "the planner broke on purpose" in result.output
    assert str(tmp_path) in result.output and "run the command again" in result.output
    assert "Traceback" not in result.output


def test_an_interrupted_run_resumes_without_replaying_stored_episodes(tmp_path: Path):
    config = {"env": "SimpleDoorKey", "planner": "test-interrupting-oracle", "episodes": 8}
    InterruptingOracle.episodes_started, InterruptingOracle.stop_at = 0, 4
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C during episode 4 (index 3)
        run_embedded("evaluate", config, out_dir=tmp_path / "run", progress=False)
    store = RunStore(tmp_path / "run" / "run.sqlite")
    (interrupted,) = store.list_runs()
    assert interrupted.status == "running"
    assert store.count_episodes(interrupted.run_id) == 3
    store.close()

    InterruptingOracle.episodes_started, InterruptingOracle.stop_at = 0, None
    resumed = run_embedded("evaluate", config, out_dir=tmp_path / "run", progress=False)
    assert resumed.run_id == interrupted.run_id and resumed.status == "completed"
    assert InterruptingOracle.episodes_started == 5  # only the 5 missing episodes were played

    fresh = run_embedded("evaluate", config, out_dir=tmp_path / "fresh", progress=False)
    assert fresh.run_id != resumed.run_id
    assert read_episodes(tmp_path / "run") == read_episodes(tmp_path / "fresh")  # deterministic
    threaded = {**config, "num_envs": 3}  # 3 episodes at once on threads: the same episodes
    run_embedded("evaluate", threaded, out_dir=tmp_path / "threaded", progress=False)
    assert read_episodes(tmp_path / "threaded") == read_episodes(tmp_path / "fresh")


def test_reuse_completed_returns_the_dirs_latest_matching_run_unplayed(tmp_path: Path):
    config = {"env": "SimpleDoorKey", "planner": "test-interrupting-oracle", "episodes": 2}
    InterruptingOracle.episodes_started, InterruptingOracle.stop_at = 0, None
    first = run_embedded("evaluate", config, out_dir=tmp_path, progress=False)
    again = run_embedded("evaluate", config, out_dir=tmp_path, progress=False, reuse_completed=True)
    assert again.run_id == first.run_id and InterruptingOracle.episodes_started == 2
    # Another config in the same dir overwrites results.json: the first run is not reused.
    run_embedded("evaluate", {**config, "episodes": 1}, out_dir=tmp_path, progress=False)
    rerun = run_embedded("evaluate", config, out_dir=tmp_path, progress=False, reuse_completed=True)
    assert rerun.run_id != first.run_id and InterruptingOracle.episodes_started == 5
    # Without reuse_completed a completed run is run again, as before.
    plain = run_embedded("evaluate", config, out_dir=tmp_path, progress=False)
    assert plain.run_id != rerun.run_id


def test_a_run_stored_before_a_config_key_existed_is_still_reused(tmp_path: Path):
    config = {"env": "SimpleDoorKey", "planner": "test-interrupting-oracle", "episodes": 2}
    InterruptingOracle.episodes_started, InterruptingOracle.stop_at = 0, None
    first = run_embedded("evaluate", config, out_dir=tmp_path, progress=False)
    stored = json.loads(first_config(tmp_path))
    added = next(key for key in stored if key not in config)  # a key left at its default
    older = {key: value for key, value in stored.items() if key != added}
    with sqlite3.connect(tmp_path / "run.sqlite") as conn:  # as an older version stored it
        conn.execute("UPDATE runs SET config = ?", (json.dumps(older),))
    again = run_embedded("evaluate", config, out_dir=tmp_path, progress=False, reuse_completed=True)
    assert again.run_id == first.run_id and InterruptingOracle.episodes_started == 2
    # a stored value that differs from today's is another config: run again
    with sqlite3.connect(tmp_path / "run.sqlite") as conn:
        conn.execute("UPDATE runs SET config = ?", (json.dumps({**older, "episodes": 1}),))
    other = run_embedded("evaluate", config, out_dir=tmp_path, progress=False, reuse_completed=True)
    assert other.run_id != first.run_id and InterruptingOracle.episodes_started == 4


def first_config(out: Path) -> str:
    with sqlite3.connect(out / "run.sqlite") as conn:
        return conn.execute("SELECT config FROM runs").fetchone()[0]


def read_episodes(out: Path) -> list[tuple[str, float, int]]:
    lines = (out / "episodes" / "evaluate.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    return [(r["episode_id"], r["episode_return"], r["length"]) for r in records]


def test_an_episode_that_raises_fails_the_run_with_its_error(tmp_path: Path):
    config = {"env": "TinyCorridor", "env_kwargs": {"fail_at_position": 2}, "episodes": 3}
    with pytest.raises(RuntimeError, match="failed"):
        run_embedded("evaluate", config, out_dir=tmp_path, progress=False)
    store = RunStore(tmp_path / "run.sqlite")
    (run,) = store.list_runs()
    assert run.status == "failed"
    assert "evaluate/0" in run.error and "corridor collapsed at cell 2" in run.error
    store.close()


def test_an_interrupted_run_is_resumed_only_under_the_numerics_it_started_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The config holds no numerics (they are the environment's): resumed under another Adam
    kernel, a run would mix two in its rows. Refused, naming the setting and how to go on."""
    config = {"env": "SimpleDoorKey", "planner": "test-interrupting-oracle", "episodes": 4}
    InterruptingOracle.episodes_started, InterruptingOracle.stop_at = 0, 2
    monkeypatch.setenv("LLMRL_ADAM", "torch")
    with pytest.raises(KeyboardInterrupt):
        run_embedded("evaluate", config, out_dir=tmp_path, progress=False)
    InterruptingOracle.episodes_started, InterruptingOracle.stop_at = 0, None
    monkeypatch.setenv("LLMRL_ADAM", "fused")
    args = ["run", "evaluate", *(f"{k}={v}" for k, v in config.items()), "--out", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    said = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "LLMRL_ADAM torch there, fused here" in said and "LLMRL_ADAM=torch llmrl run" in said
    assert InterruptingOracle.episodes_started == 0  # nothing ran
    monkeypatch.setenv("LLMRL_ADAM", "torch")
    resumed = run_embedded("evaluate", config, out_dir=tmp_path, progress=False)
    assert resumed.status == "completed" and InterruptingOracle.episodes_started == 3
    assert resumed.numerics["adam"] == "torch"
