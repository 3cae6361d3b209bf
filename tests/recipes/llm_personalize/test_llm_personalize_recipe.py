"""The llm-personalize recipe end to end at tiny scale, in real `llmrl run` processes: killed
after the bootstrap round completes, restarted, it resumes without redoing completed phases
and finishes with the per-round table and plot."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support.tiny_llm import tiny_gateway_settings

from llmrl.common.chat_format import chat_jsonl_errors
from llmrl.orchestrator.compare import RunData, build_report
from llmrl.recipes.results import Results

CONFIG = [
    "model=tiny", "data_dir=procedural", "train_episodes=2", "eval_episodes=1", "rounds=1",
    "collect_samples=2", "max_steps=6", "max_tokens=16", "sft_steps=4", "sft_lr=0.01",
    "lora_r=4", "num_envs=2", "seed=3", "replay_bootstrap_examples=2",
    "round_sft_lr=0.005",
]  # fmt: skip
BEFORE_ROUND_1 = ["evaluate/zero-shot", "demonstrate", "annotate/0", "train/0", "evaluate/0"]


def phases(db: Path) -> dict[str, tuple[str, float | None, str]]:
    """phase -> (status, finished, outputs), read without writing."""
    if not db.exists():
        return {}
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
        try:
            rows = conn.execute("SELECT phase, status, finished, outputs FROM phases").fetchall()
        except sqlite3.OperationalError:  # the schema is not created yet
            return {}
    return {phase: (status, finished, outputs) for phase, status, finished, outputs in rows}


def stored_episodes(db: Path) -> dict[str, float]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
        return dict(conn.execute("SELECT episode_id, stored FROM episodes").fetchall())


def start(out: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "llmrl.cli", "run", "llm-personalize", *CONFIG, "--out", str(out),
         "--quiet"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip


def test_a_killed_run_resumes_after_the_bootstrap_round(tiny_model_dir: Path, tmp_path: Path):
    gateway_config = tmp_path / "gateway.yaml"
    gateway_config.write_text(yaml.safe_dump(tiny_gateway_settings(tiny_model_dir)))
    env = dict(os.environ)
    env.update(
        LLMRL_HOME=str(tmp_path / "home"),
        LLMRL_LLM_GATEWAY_CONFIG=str(gateway_config),
        LLMRL_LOG_LEVEL="WARNING",
    )
    out = tmp_path / "run"
    db = out / "run.sqlite"

    first = start(out, env)
    try:
        deadline = time.monotonic() + 150
        while phases(db).get("evaluate/0", ("",))[0] != "completed":
            assert first.poll() is None, f"the run ended early:\n{first.stdout.read()}"
            assert time.monotonic() < deadline, "the bootstrap round did not complete in time"
            time.sleep(0.1)
        os.killpg(first.pid, signal.SIGKILL)  # the orchestrator dies between rounds
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    done_before = {p: v for p, v in phases(db).items() if v[0] == "completed"}
    assert set(BEFORE_ROUND_1) <= set(done_before)
    episodes_before = stored_episodes(db)
    adapter_0 = Path(json.loads(done_before["train/0"][2])["adapter_dir"])
    adapter_0_written = (adapter_0 / "adapter_model.safetensors").stat().st_mtime

    second = start(out, env)
    output, _ = second.communicate(timeout=150)
    assert second.returncode == 0, output
    assert "resuming run" in output

    after = phases(db)
    for phase, (status, finished, outputs) in done_before.items():
        assert after[phase] == (status, finished, outputs), f"{phase} was run again"
    assert all(after[p][0] == "completed" for p in ["collect/1", "annotate/1", "train/1", "report"])
    episodes_after = stored_episodes(db)
    assert {e: episodes_after[e] for e in episodes_before} == episodes_before  # none replayed
    assert sum(e.startswith("collect/1/") for e in episodes_after) == 2 * 2
    assert (adapter_0 / "adapter_model.safetensors").stat().st_mtime == adapter_0_written
    # round 1 continued from the bootstrap adapter and wrote version 1 beside it
    train_1 = json.loads(after["train/1"][2])
    assert (
        train_1["model"].endswith("@1") and Path(train_1["adapter_dir"]).parent == adapter_0.parent
    )

    results = json.loads((out / "results.json").read_text())
    assert results["columns"] == ["scene", "episodes", "zero-shot", "bootstrap", "round 1"]
    assert [(r["scene"], r["episodes"]) for r in results["rows"]] == [
        ("procedural", "train"), ("procedural", "held-out")
    ]  # fmt: skip
    assert (out / "llm_personalize.png").stat().st_size > 0
    # how many examples each stage selected, and by which rule (the default: by episode)
    assert any(n.startswith("bootstrap: ") and "SFT examples" in n for n in results["notes"])
    assert any(
        n.startswith("round 1: ") and "SFT examples selected (by episode)" in n
        for n in results["notes"]
    )
    assert chat_jsonl_errors(out / "datasets" / "bootstrap.jsonl") == []
    # round 1 replayed 2 of the bootstrap examples beside its own selection
    bootstrap = (out / "datasets" / "bootstrap.jsonl").read_text().splitlines()
    replayed = (out / "datasets" / "bootstrap-replay-1.jsonl").read_text().splitlines()
    assert len(bootstrap) > 2 and len(replayed) == 2 and set(replayed) <= set(bootstrap)
    selected = (out / "datasets" / "round-1.jsonl").read_text().splitlines()
    # the round continued at its own learning rate, the bootstrap at sft_lr
    assert json.loads(after["train/0"][2])["learning_rate"] == 0.01
    assert train_1["learning_rate"] == 0.005
    assert train_1["examples"] == len(selected) + 2
    assert "llm-personalize: tiny on Housekeep" in output  # the table is printed

    # each evaluation episode's success per split and stage, in episode order: the targets
    # pair the stages episode by episode (one episode per split: the table's own rows)
    by_split = {row["episodes"]: row for row in results["rows"]}
    for split in ("train", "held-out"):
        for stage in ("zero-shot", "bootstrap", "round 1"):
            assert results["samples"][f"{split}/{stage}"] == [by_split[split][stage]]
    run = RunData("lp", "llm-personalize", {"seed": 0}, "completed", Results.from_dict(results))
    verdicts = build_report([run], out / "report", "tiny", plots=False)["verdicts"]
    assert [v["target"] for v in verdicts] == [
        "held out: bootstrap − zero-shot, success points",
        "held out: round 1 − bootstrap, success points",
    ]
    held_out = by_split["held-out"]
    assert verdicts[1]["mean"] == pytest.approx(held_out["round 1"] - held_out["bootstrap"])
    assert verdicts[1]["basis"] == "1 paired episodes, each averaged over 1 seed(s)"
    # the counts behind the rates, beside the table
    diagnostics = (out / "diagnostics.md").read_text()
    assert "# Paired per-episode differences of success rate" in diagnostics
    assert "# Completed skills and placement changes per phase and split" in diagnostics
