"""GLAM's training as the learner's policy job "glam": parsed and run as the learner service
does (`parse_policy_job`, `run_policy_job`), in-process here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import support.tiny_text_env  # noqa: F401  (registers TinyTextGoForward)
from support.tiny_llm import make_tiny_llama
from support.tiny_text_env import ENV_ID

from llmrl.learner.adapters import adapter_versions
from llmrl.learner.policy_jobs import PolicyJobError, parse_policy_job, run_policy_job


def test_the_learner_runs_a_glam_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    # a local model directory is a path the job names: it must lie under the learner's home
    model = str(make_tiny_llama(tmp_path / "home" / "llama", initializer_range=0.02))
    body = {
        "kind": "glam",
        "env": ENV_ID,
        "model": model,
        "adapter": "glam-job",
        "total_timesteps": 8,
        "ppo": {
            "num_envs": 4,
            "num_steps": 2,
            "minibatch_size": 8,
            "update_epochs": 1,
            "reduction": "mean",
            "lora_r": 4,
        },
    }
    reported: list[int] = []
    result = run_policy_job(parse_policy_job(body), reported.append)
    assert [n for n in reported if n] == [8]  # 0s: cancel points before the first update
    assert result["update"] == 1 and result["global_step"] == 8
    assert result["served_model"] == f"{model}:glam-job@1"
    assert adapter_versions(model, "glam-job").versions() == ["1"]
    # the job's rank is the saved adapter's (alpha 2 x rank), which the gateway loads
    saved = json.loads((Path(result["checkpoint"]) / "adapter_config.json").read_text())
    assert (saved["r"], saved["lora_alpha"]) == (4, 8)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"total_timesteps": 0}, "total_timesteps"),
        ({"ppo": {"reduction": "max"}}, "ppo.reduction"),
        ({"ppo": {"lora_r": 0}}, "ppo.lora_r"),
        ({"learning_rate": 0.1}, "learning_rate"),  # a flat key: the group's keys only
        ({"env": "NoSuchEnv"}, "env"),  # unknown
        ({"env": "SimpleDoorKey"}, "env"),  # registered, but not a GLAM text env
    ],
)
def test_a_bad_glam_job_names_the_field(change: dict, field: str) -> None:
    body = {
        "kind": "glam",
        "env": ENV_ID,
        "model": "tiny",
        "adapter": "a",
        "total_timesteps": 8,
        **change,
    }
    with pytest.raises(PolicyJobError, match=field):
        parse_policy_job(body)


def test_a_job_cannot_load_a_model_directory_outside_the_learners_roots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    home = tmp_path / "home"
    for body in (
        {"kind": "glam", "env": ENV_ID, "model": "/usr", "adapter": "a", "total_timesteps": 8},
        {
            "kind": "kalm-grounding",
            "datasets": [str(home / "d.npz")],
            "model_path": str(home / "m"),
            "base_model": "/usr",
        },
    ):
        with pytest.raises(PolicyJobError, match=r"model: '/usr' is outside the folders"):
            parse_policy_job(body)


@pytest.mark.parametrize("model", ["~nosuchuser-llmrl/x", "a\x00b/c", "./" + "a" * 5000])
def test_an_unusable_model_name_is_refused_naming_the_field(
    model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    body = {"kind": "glam", "env": ENV_ID, "model": model, "adapter": "a", "total_timesteps": 8}
    with pytest.raises(PolicyJobError, match="model"):
        parse_policy_job(body)
