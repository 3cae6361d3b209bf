"""Algorithms looked up by name train, save versioned checkpoints and load back through the
one contract; unknown names and settings are refused naming what is allowed."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium
import numpy as np
import pytest

from llmrl.common.registry import UnknownNameError, registry
from llmrl.learner.adapters import adapter_versions
from llmrl.learner.algorithms import Algorithm, Versions, load_cached
from llmrl.learner.algorithms.sb3 import learning_rate_schedule

EXAMPLE = {
    "messages": [
        {"role": "user", "content": "Where does the mug go?"},
        {"role": "assistant", "content": "1. place mug_1 on counter_1"},
    ]
}
# a few timesteps of each SB3 algorithm on CartPole: enough to train, save and reload
SB3_SETTINGS = {
    "ppo": {"n_steps": 32, "batch_size": 32, "n_epochs": 1},
    "a2c": {"n_steps": 8},
    "dqn": {"learning_starts": 16, "buffer_size": 1_000, "train_freq": 4},
}


def cartpole() -> object:
    from stable_baselines3.common.vec_env import DummyVecEnv

    return DummyVecEnv([lambda: gymnasium.make("CartPole-v1")])


def test_every_family_is_registered_under_the_contract():
    names = registry.names("algorithm")
    assert {"ppo", "a2c", "dqn", "sft"} <= set(names)
    for name in names:
        algorithm = registry.get_algorithm(name)
        assert isinstance(algorithm, Algorithm) and algorithm.name == name
        assert algorithm.learns_from in ("env", "dataset")
    assert registry.get_algorithm("ppo").family == "sb3-on-policy"
    assert registry.get_algorithm("dqn").family == "sb3-off-policy"
    assert registry.get_algorithm("sft").learns_from == "dataset"
    assert registry.get_algorithm("llm-ppo").learns_from == "env"


def test_an_unknown_algorithm_names_the_registered_ones():
    with pytest.raises(UnknownNameError, match=r"unknown algorithm 'ppo2'") as error:
        registry.get_algorithm("ppo2")
    listed = str(error.value).partition("registered algorithms: ")[2].split(";")[0].split(", ")
    assert {
        "a2c",
        "dqn",
        "dqn-ellm",
        "llm-ppo",
        "ppo",
        "sft",
        "bc",
        "cql",
        "kalm-grounding",
    } <= set(listed)
    with pytest.raises(UnknownNameError, match="registered algorithms"):
        load_cached("ppo2", "model.zip")


@pytest.mark.parametrize("name", sorted(SB3_SETTINGS))
def test_sb3_algorithms_train_version_and_reload_by_name(name: str, tmp_path: Path):
    algorithm = registry.get_algorithm(name)
    line = Versions(tmp_path / "policies" / "cartpole")
    steps: list[int] = []
    settings = dict(total_timesteps=64, seed=1, **SB3_SETTINGS[name])
    first = algorithm.train(cartpole(), line, on_progress=steps.append, **settings)
    # a line at its budget would be returned as it is (resumed): a second run beside it
    second = algorithm.train(cartpole(), line.root, resume=False, **{**settings, "seed": 2})

    assert (first.version, second.version) == ("1", "2")
    assert line.latest() == second and line.next_version() == "3"
    assert first.algorithm == name and first.result["timesteps"] >= 64
    assert first.config["total_timesteps"] == 64 and sum(steps) >= 64
    assert (first.path / "model.zip").is_file()

    observations = np.zeros((5, 4), np.float32) + np.linspace(-0.1, 0.1, 5)[:, None]
    reloaded = algorithm.load(first)
    assert type(reloaded).__name__ == name.upper()
    actions, _ = reloaded.predict(observations, deterministic=True)
    # a version directory, its model file and the line (its latest version) all load
    for path in (first.path, first.path / "model.zip"):
        again, _ = algorithm.load(path).predict(observations, deterministic=True)
        assert np.array_equal(again, actions)
    latest, _ = algorithm.load(line.root).predict(observations, deterministic=True)
    expected, _ = algorithm.load(second).predict(observations, deterministic=True)
    assert np.array_equal(latest, expected)


def test_a_checkpoint_loads_only_with_its_own_algorithm(tmp_path: Path):
    ppo = registry.get_algorithm("ppo")
    checkpoint = ppo.train(cartpole(), tmp_path, total_timesteps=32, n_steps=32, batch_size=32)
    with pytest.raises(ValueError, match=r"written by 'ppo'.*not 'a2c'"):
        registry.get_algorithm("a2c").load(checkpoint.path)
    with pytest.raises(ValueError, match="names no artifact llmrl saved"):
        ppo.load(tmp_path / "missing.zip")


@pytest.mark.parametrize(("schedule", "last_rate"), [("constant", 0.01), ("linear", 0.0)])
def test_the_learning_rate_schedule_reaches_ppos_optimiser(schedule, last_rate, tmp_path):
    rate = learning_rate_schedule(0.01, schedule)
    ppo = registry.get_algorithm("ppo")
    checkpoint = ppo.train(
        cartpole(), tmp_path, total_timesteps=64, learning_rate=rate, **SB3_SETTINGS["ppo"]
    )
    model = ppo.load(checkpoint)  # the schedule is saved with the model and loads back
    # the last of the two updates ran at the schedule's end: annealed to 0, or unchanged
    assert model.policy.optimizer.param_groups[0]["lr"] == pytest.approx(last_rate)
    assert model.lr_schedule(1.0) == pytest.approx(0.01)
    assert model.lr_schedule(0.5) == pytest.approx(0.01 if schedule == "constant" else 0.005)


def test_an_unknown_learning_rate_schedule_is_refused_naming_the_key():
    with pytest.raises(ValueError, match="lr_schedule: expected constant or linear"):
        learning_rate_schedule(0.01, "cosine")  # type: ignore[arg-type]


def test_an_unknown_setting_is_refused_naming_the_allowed_ones(tmp_path: Path):
    with pytest.raises(ValueError, match=r"^ppo: n_stepz: unknown setting; allowed: .*n_steps"):
        registry.get_algorithm("ppo").train(cartpole(), tmp_path, n_stepz=8)
    with pytest.raises(ValueError, match=r"^sft: lora_rank: unknown setting; allowed: base_model"):
        registry.get_algorithm("sft").train("data.jsonl", tmp_path, base_model="m", lora_rank=8)
    with pytest.raises(ValueError, match=r"^sft: base_model: required \(a local HF model"):
        registry.get_algorithm("sft").train("data.jsonl", tmp_path, steps=1)
    assert list(tmp_path.iterdir()) == []  # nothing was saved


def test_the_model_cache_loads_once_and_again_after_a_rewrite(tmp_path: Path):
    ppo = registry.get_algorithm("ppo")
    settings = dict(total_timesteps=32, n_steps=32, batch_size=32)
    checkpoint = ppo.train(cartpole(), tmp_path, version="1", **settings)
    model = load_cached("ppo", checkpoint.path / "model.zip")
    assert load_cached("ppo", checkpoint.path / "model.zip") is model
    rewritten = ppo.train(cartpole(), tmp_path, version="1", seed=5, resume=False, **settings)
    assert rewritten.path == checkpoint.path
    assert load_cached("ppo", rewritten.path / "model.zip") is not model


def test_sft_trains_versions_and_reloads_by_name(tiny_model_dir: Path, tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    data = tmp_path / "train.jsonl"
    data.write_text((json.dumps(EXAMPLE) + "\n") * 4)
    sft = registry.get_algorithm("sft")
    line = adapter_versions("tiny", "mine")
    settings = dict(base_model=str(tiny_model_dir), steps=2, batch_size=2, learning_rate=1e-2,
                    lora_r=4, max_length=256, bf16=False)  # fmt: skip
    steps: list[int] = []
    first = sft.train(str(data), line, on_progress=steps.append, **settings)
    second = sft.train([str(data)], line, init_adapter=str(first.path), **settings)

    assert (first.version, second.version) == ("1", "2") and line.latest() == second
    assert first.path == tmp_path / "home" / "adapters" / "tiny" / "mine" / "1"
    assert (first.path / "adapter_config.json").is_file()  # what the gateway loads
    assert first.algorithm == "sft" and first.result["steps"] == 2 and steps == [1, 1]
    assert second.config["init_adapter"] == str(first.path)

    tuned = sft.load(line.root)  # the latest version, on the base model it was trained on
    ids = tuned.tokenizer("Where does the mug go?", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        adapted = tuned.model(input_ids=ids).logits
        with tuned.model.disable_adapter():
            base = tuned.model(input_ids=ids).logits
    assert not torch.allclose(adapted, base)
    assert list(tuned.model.peft_config) == ["default"]
