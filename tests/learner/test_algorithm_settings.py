"""Algorithm settings as pydantic models (`llmrl.learner.algorithms.base`): one message format
naming each bad key, fields of configs and requests derived from the models, and the learner
service refusing a bad setting of each algorithm over real HTTP (422 naming the key) before
any job starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import support.tiny_text_env  # noqa: F401  (registers TinyTextGoForward)
from pydantic import BaseModel, Field
from support.tiny_text_env import ENV_ID

from llmrl.learner.algorithms.base import AlgorithmSettings, setting_field, validate_settings
from llmrl.learner.service import create_app
from llmrl.llm_gateway.service import RestServer


class Toy(AlgorithmSettings):
    rate: float = Field(0.1, gt=0, le=1, description="a rate")
    count: int = Field(3, gt=0, description="a count")
    names: list[str] = Field(default_factory=lambda: ["a"], min_length=1, description="names")
    model: str = Field(description="a required one")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"rate": 2.0}, "toy: rate: Input should be less than or equal to 1 (got 2.0)"),
        ({"rate": float("nan")}, "toy: rate: Input should be a finite number (got nan)"),
        ({"rate": float("inf")}, "toy: rate: Input should be a finite number (got inf)"),
        ({"rate": "0.5"}, "toy: rate: Input should be a valid number (got '0.5')"),
        ({"count": 2.0}, "toy: count: Input should be a valid integer (got 2.0)"),
        ({"count": True}, "toy: count: Input should be a valid integer (got True)"),
        ({"names": ["a", 1]}, "toy: names.1: Input should be a valid string (got 1)"),
        ({"cuont": 2}, "toy: cuont: unknown setting; allowed: rate, count, names, model"),
    ],
)
def test_a_bad_setting_is_refused_naming_its_key(settings: dict, message: str) -> None:
    with pytest.raises(ValueError) as refused:
        validate_settings("toy", Toy, {"model": "m", **settings})
    assert str(refused.value) == message


def test_every_problem_is_named_and_a_missing_one_says_what_it_is() -> None:
    with pytest.raises(ValueError) as refused:
        validate_settings("toy", Toy, {"count": 0, "x": 1})
    assert str(refused.value) == (
        "toy: count: Input should be greater than 0 (got 0); model: required (a required one); "
        "x: unknown setting; allowed: rate, count, names, model"
    )
    assert validate_settings("toy", Toy, {"model": "m", "rate": 1}).rate == 1.0


def test_a_derived_field_keeps_the_settings_default_description_and_bounds() -> None:
    class Recipe(BaseModel):
        toy_rate: float = setting_field(Toy, "rate", le=0.5)  # a tighter bound of its own
        toy_names: list[str] = setting_field(Toy, "names", "the toy's names")

    rate, names = Recipe.model_fields["toy_rate"], Recipe.model_fields["toy_names"]
    assert (rate.default, rate.description) == (0.1, "a rate")
    assert (names.default, names.description) == (["a"], "the toy's names")
    assert Recipe().toy_names is not Recipe().toy_names  # a fresh list each
    for bad in ({"toy_rate": 0}, {"toy_rate": 0.7}, {"toy_names": []}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            Recipe(**bad)


# -- the learner service over HTTP: every algorithm's bad setting is a 422 naming the key --------
def refused_keys(client: httpx.Client, path: str, body: dict[str, Any]) -> list[str]:
    """The keys a 422 answer to `body` names (each error's location past `body`, and the key a
    message names first)."""
    answer = client.post(path, json=body)
    assert answer.status_code == 422, answer.text
    return [
        ".".join(map(str, error["loc"][1:])) + " " + error["msg"]
        for error in answer.json()["detail"]
    ]


@pytest.fixture
def learner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    server = RestServer(create_app(tmp_path / "jobs")).start()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client
        assert client.get("/jobs").json() == [] and client.get("/policy-jobs").json() == []
    server.stop()


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"learning_rate": -1}, "learning_rate"),
        ({"learning_rate": 2}, "learning_rate"),  # the API's own bound beside sft's
        ({"batch_size": "four"}, "batch_size"),
        ({"epochs": 0}, "epochs"),
        ({"lora_rank": 8}, "lora_rank"),  # unknown
    ],
)
def test_a_bad_sft_setting_is_a_422_naming_it(learner, tmp_path: Path, change, key) -> None:
    data = tmp_path / "home" / "train.jsonl"
    data.parent.mkdir(parents=True)
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    [problem] = refused_keys(learner, "/jobs", {"data": [str(data)], **change})
    assert problem.startswith(f"{key} "), problem


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"ppo": {"learning_rate": 0}}, "ppo.learning_rate"),
        ({"ppo": {"num_steps": 0}}, "ppo.num_steps"),  # llm-ppo's own key and bound
        ({"ppo": {"gae_lambda": 1.5}}, "ppo.gae_lambda"),
        ({"ppo": {"reduction": "max"}}, "ppo.reduction"),
        ({"ppo": {"device": "tpu"}}, "ppo.device"),
        ({"ppo": {"lora_r": 0}}, "ppo.lora_r"),
        ({"ppo": {"rollout_steps": 8}}, "ppo.rollout_steps"),  # unknown: llm-ppo's num_steps
        ({"learning_rate": 0.1}, "learning_rate"),  # unknown: the job carries llm-ppo's group
    ],
)
def test_a_bad_llm_ppo_setting_is_a_422_naming_it(learner, change, key) -> None:
    body = {"kind": "glam", "env": ENV_ID, "model": "tiny", "adapter": "a", "total_timesteps": 8}
    [problem] = refused_keys(learner, "/policy-jobs", {**body, **change})
    assert problem.startswith(f"{key} "), problem


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"learning_rate": -1}, "learning_rate"),
        ({"batch_size": 2.5}, "batch_size"),
        ({"state_loss_weight": 0}, "state_loss_weight"),
        ({"numbers": "words"}, "numbers"),
        ({"tasks": ["sing"]}, "tasks"),
        ({"head_lr": 1}, "head_lr"),  # unknown
    ],
)
def test_a_bad_grounding_setting_is_a_422_naming_it(learner, tmp_path, change, key) -> None:
    home = tmp_path / "home"
    body = {"kind": "kalm-grounding", "datasets": [str(home / "d.npz")],
            "model_path": str(home / "g")}  # fmt: skip
    [problem] = refused_keys(learner, "/policy-jobs", {**body, **change})
    assert problem.startswith(f"{key} "), problem


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"batch_size": 0}, "batch_size "),
        ({"offline": {"gamma": 3}}, "offline Value error, offline.gamma: Input should be less"),
        ({"offline": {"learning_rate": "fast"}}, "offline Value error, offline.learning_rate: "),
        ({"offline": {"hidden_units": [64, 0]}}, "offline Value error, offline.hidden_units.1: "),
        ({"offline": {"epochs": 3}}, "offline Value error, offline.epochs: not an offline RL"),
    ],
)
def test_a_bad_offline_rl_setting_is_a_422_naming_it(learner, tmp_path, change, named) -> None:
    home = tmp_path / "home"
    body = {"kind": "kalm-offline", "algorithm": "bc", "datasets": [str(home / "d.npz")],
            "model_path": str(home / "p")}  # fmt: skip
    [problem] = refused_keys(learner, "/policy-jobs", {**body, **change})
    assert problem.startswith(named), problem


@pytest.mark.parametrize(
    ("path", "body", "key"),
    [
        ("/jobs", {"data": ["x.jsonl"], "learning_rate": "NaN"}, "body.learning_rate"),
        ("/policy-jobs", {"kind": "glam", "ppo": {"gamma": "Infinity"}}, "body.ppo.gamma"),
        (
            "/policy-jobs",
            {"kind": "kalm-offline", "offline": {"alpha": "NaN"}},
            "body.offline.alpha",
        ),
    ],
)
def test_nan_and_infinity_are_refused_naming_the_key(learner, path, body, key) -> None:
    """JSON cannot carry them, Python's parser reads them: refused where the body is read."""
    text = json.dumps(body).replace('"NaN"', "NaN").replace('"Infinity"', "Infinity")
    answer = learner.post(path, content=text, headers={"content-type": "application/json"})
    assert answer.status_code == 400 and answer.json()["field"] == key, answer.text
