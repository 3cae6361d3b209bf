"""A trained ELLM agent plays episode jobs through its driver (`ellm-dqn`), here in the
`evaluate` recipe; a spec without a checkpoint is refused naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import support.tiny_crafter_text  # noqa: F401  (registers TinyCrafterText)
from support.tiny_crafter_text import ENV_ID

from llmrl.agents import EpisodeJob, RolloutResources, make_driver
from llmrl.common.registry import registry
from llmrl.learner.algorithms import Versions
from llmrl.orchestrator.embedded import run_embedded


def test_a_trained_agent_plays_the_evaluate_recipe(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    line = tmp_path / "dqn"
    registry.get_algorithm("dqn-ellm").train(
        ENV_ID, Versions(line), total_timesteps=80, num_envs=2, learning_starts=20, hidden=16
    )
    out = tmp_path / "run"
    policy = {"kind": "ellm-dqn", "checkpoint": str(line), "epsilon": 0.0}
    run_embedded(
        "evaluate", {"env": ENV_ID, "policy": policy, "episodes": 2}, out_dir=out, progress=False
    )
    episodes = [json.loads(t) for t in (out / "episodes" / "evaluate.jsonl").open()]
    assert len(episodes) == 2 and all(e["length"] == 20 for e in episodes)
    assert all(isinstance(step["action"], int) for step in episodes[0]["steps"])


def test_a_spec_without_checkpoint_is_refused():
    job = EpisodeJob(run_id="r", episode_id="e/0", env=ENV_ID, seed=0, policy={})
    build = make_driver
    with pytest.raises(ValueError, match=r"policy\.checkpoint"):
        build({"kind": "ellm-dqn"}, RolloutResources(simulator=None, llm_gateway=None), job)
