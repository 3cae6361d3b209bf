"""What `llmrl run` prints in a log or a pipe: tables whole, progress as a line now and then,
and the run's LLM use from the gateway's ledger (a second run is served from the cache)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from rich.console import Console
from support.tiny_llm import tiny_gateway_settings

from llmrl.common.console import output_console
from llmrl.orchestrator.embedded import llm_summary, results_table
from llmrl.recipes.progress import LineProgress, make_progress
from llmrl.recipes.results import Results

COLUMNS = [f"headline_metric_{i}" for i in range(12)]


def wide_results() -> Results:
    rows = [
        {column: f"{method}-{i}.{i}" for i, column in enumerate(COLUMNS)}
        for method in ("always", "never", "random", "learned")
    ]
    return Results(title="when2ask-like", rows=rows)


def test_a_wide_results_table_prints_whole_off_a_terminal():
    squeezed, whole = io.StringIO(), io.StringIO()
    Console(file=squeezed, width=80).print(results_table(wide_results()))  # rich off a tty
    assert "…" in squeezed.getvalue()  # the problem: 80 columns, cells cut
    console = output_console(file=whole)
    assert not console.is_terminal
    console.print(results_table(wide_results()))
    text = whole.getvalue()
    assert "…" not in text
    for row in wide_results().rows:
        line = next(line for line in text.splitlines() if row[COLUMNS[0]] in line)
        assert [cell.strip() for cell in line.strip("│ ").split("│")] == list(row.values())
    header = next(line for line in text.splitlines() if COLUMNS[0] in line)
    assert all(column in header for column in COLUMNS)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_off_a_terminal_is_a_line_per_tenth_or_half_minute():
    out, clock = io.StringIO(), FakeClock()
    console = output_console(file=out)
    assert isinstance(make_progress(console), LineProgress)
    progress = LineProgress(console, every_s=30.0, clock=clock)
    progress.start("evaluate", total=100)
    for _ in range(100):
        clock.now += 0.1
        progress.advance()
    progress.finish()
    lines = out.getvalue().splitlines()
    assert lines[0] == "evaluate episodes: 0/100 (0%), 0:00:00 elapsed"
    counts = [int(re.match(r"evaluate episodes: (\d+)/100", line)[1]) for line in lines]
    assert counts == [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    assert "about 0:00:09 left" in lines[1]  # 10 done in 1 s, 90 to go
    assert lines[-1] == "evaluate episodes: 100/100 in 0:00:10"

    slow, clock = io.StringIO(), FakeClock()
    progress = LineProgress(output_console(file=slow), every_s=30.0, clock=clock)
    progress.start("collect", total=1000, done=500, unit="steps")  # a resumed phase
    for _ in range(20):  # 1% of the phase, one step every 10 s
        clock.now += 10
        progress.advance()
    lines = slow.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [
        "collect steps: 500/1000 (50%)",
        "collect steps: 503/1000 (50%)",
        "collect steps: 506/1000 (50%)",
        "collect steps: 509/1000 (50%)",
        "collect steps: 512/1000 (51%)",
        "collect steps: 515/1000 (51%)",
        "collect steps: 518/1000 (51%)",
    ]
    assert "about 1:22:50 left" in lines[1]  # 3 steps in 30 s, 497 to go


def test_llm_summary_says_how_many_calls_the_cache_served():
    usage = {
        "requests": 412,
        "cache_hits": 412,
        "model_calls": 0,
        "errors": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cost_usd": 0.0,
    }
    line = llm_summary(usage)
    assert "412 calls through the gateway, 412 of 412 served from the cache" in line
    assert "0 tokens computed" in line and "$0.0000" in line
    usage.update(cache_hits=2, prompt_tokens=12_000, completion_tokens=345, cost_usd=0.0123)
    line = llm_summary(usage)
    assert "2 of 412 served from the cache; 12,345 tokens computed" in line
    assert "(12,000 prompt + 345 completion); cost $0.0123" in line


def run_llmrl(args: list[str], env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "llmrl.cli", *args],
        env=env,
        stdout=subprocess.PIPE,  # a pipe: not a terminal
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout
    return result.stdout


def test_llmrl_run_in_a_pipe_then_again_from_the_cache(tiny_model_dir: Path, tmp_path: Path):
    gateway_config = tmp_path / "gateway.yaml"
    gateway_config.write_text(yaml.safe_dump(tiny_gateway_settings(tiny_model_dir, "sqlite")))
    env = {
        **os.environ,
        "LLMRL_HOME": str(tmp_path / "home"),
        "LLMRL_LLM_GATEWAY_CONFIG": str(gateway_config),
        "LLMRL_LOG_LEVEL": "WARNING",
    }
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    args = ["run", "evaluate", "env=SimpleDoorKey", "planner=when2ask-llm", "episodes=10"]
    args += ["max_steps=20", "--out", str(tmp_path / "run")]

    first = run_llmrl(args, env)
    assert "\r" not in first  # nothing redrawn
    assert "Loading weights" not in first  # Hugging Face's tqdm bar is off in a pipe
    progress = re.findall(r"^evaluate episodes: (\d+)/10\b", first, flags=re.MULTILINE)
    assert progress[0] == "0" and progress[-1] == "10" and len(progress) <= 12
    assert "llm_calls_per_episode" in first  # the results table
    calls = int(re.search(r"LLM: (\d+) calls through the gateway", first)[1])
    assert calls >= 10  # the planner asks at least once per episode
    hits = int(re.search(rf"(\d+) of {calls} served from the cache", first)[1])
    assert hits < calls  # an episode may repeat an earlier prompt, but most are new
    assert re.search(r"; [1-9][\d,]* tokens computed", first)

    second = run_llmrl(args, env)  # the same episodes: every call is a cache hit
    assert f"LLM: {calls} calls through the gateway, {calls} of {calls} served from the cache" in (
        second
    )
    assert "; 0 tokens computed" in second


def test_results_json_is_strict_json_with_a_missing_cell_as_null(tmp_path: Path):
    import json

    import numpy as np

    from llmrl.common.store import RunStore
    from llmrl.recipes.config import validate_config
    from llmrl.recipes.context import RunContext

    store = RunStore(tmp_path / "run.sqlite")
    config = validate_config("evaluate", {})
    run_id = store.create_run("evaluate", config.model_dump(), tmp_path)
    ctx = RunContext(
        run_id=run_id, recipe="evaluate", config=config, out_dir=tmp_path, store=store,
        executor=None,
    )  # fmt: skip
    rows = [{"method": "none", "score": float("nan"), "best": np.float64("inf"), "n": 3}]
    ctx.write_results(Results(title="t", rows=rows, notes=[f"ratio {np.float32(0.5)}"]))

    def refuse(constant: str) -> None:
        raise ValueError(f"not strict JSON: {constant}")

    data = json.loads((tmp_path / "results.json").read_text(), parse_constant=refuse)
    assert data["rows"] == [{"method": "none", "score": None, "best": None, "n": 3}]
    assert "| none | n/a | inf | 3 |" in (tmp_path / "results.md").read_text()
    store.close()


def test_measured_columns_are_kept_and_left_out_of_what_must_repeat():
    """A column of time measured on this machine (GRPO's cpu_minutes) is in the table and in
    results.json, named as measured, and left out of the rows a same-bits check compares."""
    from llmrl.recipes.results import computed_rows

    rows = [{"method": "grpo", "success_rate": 0.4, "cpu_minutes": 3.2}]
    results = Results(title="t", rows=rows, measured=["cpu_minutes"])
    data = results.to_dict()
    assert data["measured"] == ["cpu_minutes"] and data["rows"] == rows
    assert Results.from_dict(data).measured == ["cpu_minutes"]
    assert computed_rows(data) == [{"method": "grpo", "success_rate": 0.4}]
    plain = Results(title="t", rows=rows).to_dict()
    assert "measured" not in plain and computed_rows(plain) == rows
