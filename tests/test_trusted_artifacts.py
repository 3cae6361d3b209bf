"""Nothing loadable from a path a client names (issue 52, findings 1 and 2): a policy spec, a
job's `init_from` or `init_adapter` may only name what the project saved itself, pickle-based
files load only when their digest was recorded, and every refusal reads the same whether the
path is missing, elsewhere or foreign. The payload is a real Stable-Baselines3 zip whose pickle
would create a file when loaded: the tests assert that file never appears."""

from __future__ import annotations

import base64
import json
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from llmrl.common import trusted
from llmrl.common.registry import registry
from llmrl.common.server_paths import redact_server_paths


class _CreatesFile:
    """Unpickled, it opens (so creates) `marker`: what an attacker's payload would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def evil_sb3_zip(path: Path, marker: Path) -> Path:
    """An SB3-format zip whose `data` holds a pickled payload SB3's loader would run."""
    payload = base64.b64encode(pickle.dumps(_CreatesFile(marker))).decode()
    data = {"policy_class": {":type:": "<class 'type'>", ":serialized:": payload}}
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("data", json.dumps(data))
        archive.writestr("_stable_baselines3_version", "2.9.2")
    return path


def evil_checkpoint(folder: Path, marker: Path, algorithm: str, model_file: str) -> Path:
    """A checkpoint version directory as `save_version` lays it out, written by hand."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "llmrl_checkpoint.json").write_text(json.dumps({"algorithm": algorithm}))
    evil_sb3_zip(folder / model_file, marker)
    return folder


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "payload-ran"


@pytest.fixture
def foreign(tmp_path: Path, marker: Path) -> dict[str, Path]:
    """Foreign files inside an allowed root (the tests' temporary folders are data roots), so
    only the digest check stands between them and a load."""
    return {
        "zip": evil_sb3_zip(tmp_path / "evil" / "evil.zip", marker),
        "dir": evil_checkpoint(tmp_path / "evil-ckpt" / "1", marker, "dqn-ellm", "model.pt"),
    }


@pytest.fixture
def orchestrator(tmp_path: Path):
    from llmrl.common.queues import make_broker
    from llmrl.common.store import RunStore
    from llmrl.orchestrator.manager import RunManager
    from llmrl.orchestrator.service import create_app

    store = RunStore(tmp_path / "orchestrator.sqlite")
    manager = RunManager(store, make_broker(None), tmp_path, simulator=None, llm_gateway=None)
    with TestClient(create_app(manager, token=None, max_body_bytes=1 << 20)) as client:
        yield client


def policies(model: str) -> list[dict]:
    """A spec of every policy kind that loads a saved file, each naming `model`."""
    return [
        {"kind": "sb3", "model": model, "keys": ["image"]},
        {"kind": "glam-sb3", "model": model},
        {"kind": "glam-drrn", "model": model},
        {"kind": "glam-checkpoint", "checkpoint": model},
        {"kind": "kalm-offline", "algorithm": "bc", "checkpoint": model},
        {"kind": "ellm-dqn", "checkpoint": model},
        {"kind": "when2ask", "ask": {"method": "learned", "model": model},
         "planner": {"name": "oracle"}},
    ]  # fmt: skip


def _field(policy: dict) -> str:
    if policy["kind"] == "when2ask":
        return "policy.ask.model"
    return "policy.model" if "model" in policy else "policy.checkpoint"


@pytest.mark.parametrize("where", ["zip", "dir", "missing", "outside"])
def test_a_run_naming_a_file_the_project_did_not_save_is_refused_naming_the_field(
    orchestrator, foreign, marker, tmp_path, where
):
    model = {
        "zip": str(foreign["zip"]),
        "dir": str(foreign["dir"]),
        "missing": str(tmp_path / "no-such.zip"),
        "outside": "/etc/passwd",
    }[where]
    for policy in policies(model):
        config = {"env": "SimpleDoorKey", "episodes": 1, "policy": policy}
        response = orchestrator.post("/runs", json={"recipe": "evaluate", "config": config})
        assert response.status_code == 422, (policy["kind"], response.text)
        assert _field(policy) in response.text
        assert "names no artifact llmrl saved" in response.text
        assert "wasn't a zip" not in response.text and "no SB3 model" not in response.text
    assert not marker.exists()


def test_refusals_read_the_same_whether_a_file_exists_or_not(orchestrator, foreign, tmp_path):
    def detail(model: str) -> str:
        config = {"env": "SimpleDoorKey", "episodes": 1, "policy": policies(model)[0]}
        text = orchestrator.post("/runs", json={"recipe": "evaluate", "config": config}).text
        # the service names a path under its folders by their variables (server_paths)
        for shown in (model, redact_server_paths(model)):
            text = text.replace(json.dumps(shown)[1:-1], "<path>")
        return text

    assert detail(str(foreign["zip"])) == detail(str(tmp_path / "evil" / "absent.zip"))


def test_a_driver_refuses_a_foreign_model_even_past_submission(foreign, marker):
    """A job that reaches a worker some other way (the queue) still loads nothing foreign."""
    from llmrl.agents import EpisodeJob, RolloutResources, make_driver

    resources = RolloutResources(simulator=None, llm_gateway=None)
    for policy in policies(str(foreign["zip"])) + policies(str(foreign["dir"])):
        job = EpisodeJob(run_id="r", episode_id="e", env="SimpleDoorKey", seed=0, policy=policy)
        with pytest.raises(ValueError, match="names no artifact llmrl saved"):
            make_driver(policy, resources, job)
    assert not marker.exists()


def test_the_loaders_check_the_digest_of_every_pickle_they_open(foreign, marker):
    from llmrl.recipes.glam.drrn_policy import load_drrn

    for algorithm in ("ppo", "dqn"):
        with pytest.raises(ValueError, match="names no artifact"):
            registry.get_algorithm(algorithm).load(foreign["zip"])
    with pytest.raises(ValueError, match="names no artifact"):
        load_drrn(str(foreign["zip"]))
    assert not marker.exists()


def test_what_the_project_saved_loads_and_llmrl_trust_vouches_for_the_rest(tmp_path, marker):
    import gymnasium as gym
    from click.testing import CliRunner
    from stable_baselines3.common.env_util import make_vec_env

    from llmrl.agents import EpisodeJob, RolloutResources, make_driver
    from llmrl.cli import main
    from llmrl.learner.versions import publish

    ppo = registry.get_algorithm("ppo")
    env = make_vec_env(lambda: gym.make("CartPole-v1"), n_envs=1)
    checkpoint = ppo.train(env, tmp_path / "line", total_timesteps=32, n_steps=32, batch_size=32)
    copy = publish(checkpoint.path / "model.zip", tmp_path / "models" / "cartpole.zip")
    for reference in (checkpoint.path, tmp_path / "line", copy):
        assert trusted.resolve_artifact(str(reference), "policy.model")
        action, _ = ppo.load(reference).predict(np.zeros((1, 4), np.float32), deterministic=True)
        assert action.shape == (1,)
    # a bare zip from elsewhere: refused until the user who runs llmrl vouches for it
    outsider = tmp_path / "elsewhere" / "cartpole.zip"
    outsider.parent.mkdir()
    ppo.load(copy).save(str(outsider))
    with pytest.raises(ValueError, match="names no artifact"):
        ppo.load(outsider)
    result = CliRunner().invoke(main, ["trust", str(outsider)])
    assert result.exit_code == 0, result.output
    assert ppo.load(outsider) is not None
    job = EpisodeJob(run_id="r", episode_id="e", env="CartPole", seed=0,
                     policy={"kind": "sb3", "model": str(outsider), "keys": ["obs"]})  # fmt: skip
    driver = make_driver(job.policy, RolloutResources(None, None), job)
    assert driver.observations == ("obs",)
    assert not marker.exists()


def test_a_policy_job_starts_only_from_a_checkpoint_the_project_saved(foreign, marker):
    from llmrl.learner.policy_jobs import PolicyJobError, parse_policy_job

    body = {"kind": "ellm", "env": "CrafterText", "method": "ellm", "frames": 16,
            "model_path": str(foreign["dir"].parent.parent / "line"),
            "init_from": str(foreign["dir"])}  # fmt: skip
    with pytest.raises(PolicyJobError, match=r"init_from: .*names no artifact"):
        parse_policy_job(body)
    assert not marker.exists()


@pytest.mark.parametrize("adapter", ["/abs/dir", "../../../../x", "a/b", "..", ""])
def test_a_glam_jobs_adapter_is_a_name_never_a_path(adapter):
    from llmrl.learner.policy_jobs import PolicyJobError, parse_policy_job

    body = {"kind": "glam", "env": "BabyAI-Text-GoToLocal", "model": "smollm2",
            "adapter": adapter, "steps": 16}  # fmt: skip
    with pytest.raises(PolicyJobError) as refused:
        parse_policy_job(body)
    assert any(error["loc"] == ("adapter",) for error in refused.value.errors)


def test_a_fine_tune_continues_only_an_adapter_the_project_saved(tmp_path):
    from pydantic import ValidationError

    from llmrl.learner.jobs import FineTuneRequest

    data = tmp_path / "chat.jsonl"
    data.write_text('{"messages": []}\n')
    planted = tmp_path / "planted-adapter"
    planted.mkdir()
    (planted / "adapter_config.json").write_text("{}")
    for adapter in (str(planted), "/etc", str(tmp_path / "none")):
        with pytest.raises(ValidationError, match="init_adapter"):
            FineTuneRequest(data=[str(data)], init_adapter=adapter)
    with pytest.raises(ValidationError, match="adapter"):
        FineTuneRequest(data=[str(data)], adapter="../x")


def test_a_run_id_and_file_name_resolve_to_that_runs_file(tmp_path, marker):
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_vec_env

    from llmrl.common import catalog
    from llmrl.recipes.config import ConfigError, validate_config

    out = tmp_path / "runs" / "trained"
    line = out / "models" / "cartpole"
    env = make_vec_env(lambda: gym.make("CartPole-v1"), n_envs=1)
    registry.get_algorithm("ppo").train(env, line, total_timesteps=32, n_steps=32, batch_size=32)
    catalog.record("run-abc", catalog.RUN, "when2ask", out / "run.sqlite", out)
    evil_sb3_zip(out / "models" / "planted.zip", marker)

    def evaluate(model: str) -> dict:
        policy = {"kind": "sb3", "model": model, "keys": ["image"]}
        config = {"env": "SimpleDoorKey", "episodes": 1, "policy": policy}
        return validate_config("evaluate", config).model_dump()["policy"]

    assert evaluate("run:run-abc/models/cartpole") == {
        "kind": "sb3", "model": str(line.resolve()), "keys": ["image"]}  # fmt: skip
    for reference in ("run:run-abc/models/planted.zip", "run:run-abc/../trained/models",
                      "run:nope/models/cartpole", "run:run-abc/", "run:/etc/passwd"):  # fmt: skip
        with pytest.raises(ConfigError, match=r"policy\.model: .*names no artifact"):
            evaluate(reference)
    assert not marker.exists()
