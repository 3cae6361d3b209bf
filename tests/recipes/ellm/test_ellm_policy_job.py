"""ELLM's training as the learner's policy job "ellm": parsed and run as the learner service
does (`parse_policy_job`, `run_policy_job`), in-process here; bad fields are named."""

from __future__ import annotations

from pathlib import Path

import pytest
import support.tiny_crafter_text  # noqa: F401  (registers TinyCrafterText)
from support.tiny_crafter_text import ENV_ID

from llmrl.learner.policy_jobs import PolicyJobError, parse_policy_job, run_policy_job
from llmrl.learner.versions import Versions


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
