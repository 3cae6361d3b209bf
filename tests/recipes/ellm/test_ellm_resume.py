"""A pretraining of the recipe `ellm` killed (SIGKILL) half-way resumes from its latest
checkpoint when the same run is started again, and finishes at its frame budget."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.processes import child_env

CONFIG = [
    "env=TinyCrafterText",
    "methods=[rnd]",
    "num_envs=4",
    "pretrain_frames=1600",
    "checkpoint_every=200",
    "finetune_frames=0",
    "finetune_from=[]",
    "eval_episodes=4",
    "learning_starts=100",
    "buffer_size=2000",
    "hidden=32",
]


AGENTS = {  # dqn-ellm, and SB3 PPO (64-frame rollouts: 1600 frames are 25 of them)
    "dqn": [],
    "ppo": ["agent=ppo", "ppo={n_steps: 16, batch_size: 32, n_epochs: 1}"],
}


def run(out: Path, home: Path, agent: str = "dqn") -> subprocess.Popen:
    env = child_env({"LLMRL_PLUGINS": "support.tiny_crafter_text", "LLMRL_HOME": str(home)})
    config = [*CONFIG, *AGENTS[agent]]
    command = [sys.executable, "-m", "llmrl.cli", "run", "ellm", *config, "--out", str(out)]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_a_killed_pretraining_resumes(tmp_path: Path, agent: str):
    out, home = tmp_path / "run", tmp_path / "home"
    line = out / "checkpoints" / "pretrain" / ("rnd" if agent == "dqn" else f"rnd-{agent}")
    first = run(out, home, agent)
    deadline = time.monotonic() + 600
    while not (line / "2").is_dir():  # two checkpoints written: kill it mid-pretraining
        assert first.poll() is None, first.stderr.read()
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.2)
    first.kill()
    first.wait()
    killed_at = json.loads((line / "2" / "llmrl_checkpoint.json").read_text())["result"]
    assert 0 < killed_at["global_step"] < 1600

    second = run(out, home, agent)
    assert second.wait(timeout=600) == 0, second.stderr.read()
    versions = sorted(int(p.name) for p in line.iterdir() if p.name.isdigit())
    final = json.loads((line / str(versions[-1]) / "llmrl_checkpoint.json").read_text())
    assert final["result"]["global_step"] == 1600
    # it went on from a saved version: fewer versions than a run from 0 would have written
    assert len(versions) <= 1600 // 200
    assert versions[0] == 1 and 2 in versions
    episodes = [json.loads(text) for text in (line / "episodes.jsonl").open()]
    frames = [e["frames"] for e in episodes]
    assert frames == sorted(frames) and frames[-1] <= 1600  # no episode logged twice
    rows = json.loads((out / "results.json").read_text())["rows"]
    label = "rnd" if agent == "dqn" else f"rnd ({agent})"
    assert rows[0]["method"] == label and rows[0]["frames"] == 1600
