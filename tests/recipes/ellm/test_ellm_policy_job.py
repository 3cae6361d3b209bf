"""ELLM's training as the learner's policy job "ellm": parsed and run as the learner service
does (`parse_policy_job`, `run_policy_job`), in-process here; bad fields are named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import support.tiny_crafter_text  # noqa: F401  (registers TinyCrafterText)
from support.tiny_crafter_text import ENV_ID

from llmrl.learner.policy_jobs import PolicyJobError, parse_policy_job, run_policy_job
from llmrl.learner.versions import Versions
from llmrl.recipes.ellm.training import EPISODES_FILE, _drop_episodes_after, read_episodes


def test_the_learner_runs_an_ellm_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))
    body = {
        "kind": "ellm",
        "env": ENV_ID,
        "num_envs": 2,
        "method": "rnd",
        "frames": 84,
        "dqn": {"learning_starts": 20, "hidden": 16, "buffer_size": 500},
        "model_path": str(tmp_path / "lines" / "rnd"),
    }
    reported: list[int] = []
    result = run_policy_job(parse_policy_job(body), reported.append)
    assert sum(reported) == 84 and result["frames"] == 84
    assert result["gradient_steps"] > 0
    assert Versions(tmp_path / "lines" / "rnd").latest().algorithm == "dqn-ellm"
    assert result["timings"]["env"] > 0 and result["timings"]["reward"] > 0


def test_the_learner_runs_a_ppo_ellm_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))
    body = {
        "kind": "ellm",
        "env": ENV_ID,
        "num_envs": 2,
        "method": "knn",
        "frames": 64,
        "agent": "ppo",
        "ppo": {"n_steps": 8, "batch_size": 16, "n_epochs": 1},
        "model_path": str(tmp_path / "lines" / "knn"),
    }
    reported: list[int] = []
    result = run_policy_job(parse_policy_job(body), reported.append)
    assert sum(reported) == 64 and result["frames"] == 64
    assert Versions(tmp_path / "lines" / "knn").latest().algorithm == "ppo"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"threshold": 1.5}, "threshold"),
        ({"method": "curiosity"}, "method"),
        ({"suggester": "oracle"}, "suggester"),
        ({"frames": 0}, "frames"),
        ({"model_path": "/etc/ellm"}, "model_path"),
        ({"task": "fly"}, "task"),
        ({"dqn": {"seed": 3}}, "dqn.seed"),
        ({"dqn": {"address": "evil:1"}}, "dqn.address"),
        ({"dqn": {"buffer_size": 10**12}}, "dqn.buffer_size"),
        ({"dqn": {"gamma": 2}}, "gamma"),
        # the ledger keys: a job bills its own run under its own tag
        ({"run_id": "../other"}, "run_id"),
        ({"run_id": "a run; DROP"}, "run_id"),
        ({"run_id": ""}, "run_id"),
        ({"run_id": "x" * 129}, "run_id"),
        ({"tag": "kalm"}, "tag"),
        ({"tag": "ellm/../glam"}, "tag"),
        ({"tag": "ellm/" + "x" * 300}, "tag"),
        # threads are the learner process's own
        ({"dqn": {"torch_threads": 4}}, "dqn.torch_threads"),
        ({"agent": "sac"}, "agent"),
        ({"ppo": {"device": "cuda"}}, "ppo.device"),
    ],
)
def test_a_bad_ellm_job_names_the_field(
    change: dict, field: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))
    body = {
        "kind": "ellm",
        "env": ENV_ID,
        "method": "none",
        "frames": 8,
        "model_path": str(tmp_path / "line"),
        **change,
    }
    with pytest.raises(PolicyJobError, match=field):
        parse_policy_job(body)


def test_run_ids_and_tags_of_the_recipe_are_accepted(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))
    body = {
        "kind": "ellm",
        "env": ENV_ID,
        "method": "none",
        "frames": 8,
        "model_path": str(tmp_path / "line"),
        "run_id": "ellm-20261123-101500-a1b2c3",
        "tag": "ellm/finetune/all-goals",
    }
    job = parse_policy_job(body)
    assert job.run_id == body["run_id"] and job.tag == body["tag"]


def test_a_resumed_job_replaces_its_episode_log_whole(tmp_path: Path) -> None:
    """The episodes after the latest version are dropped by writing a new file and renaming
    it over the old one: a reader of the old file (or a kill mid-way) never sees it cut."""
    line = tmp_path / "line"
    line.mkdir()
    log = line / EPISODES_FILE
    old = "".join(json.dumps({"frames": f, "unlocked": 1}) + "\n" for f in (10, 20, 30, 40))
    log.write_text(old)
    with log.open() as reader:  # opened before: still the whole old file afterwards
        _drop_episodes_after(line, 25)
        assert reader.read() == old
    assert [e["frames"] for e in read_episodes(line)] == [10, 20]
    assert sorted(p.name for p in line.iterdir()) == [EPISODES_FILE]  # no temporary left
