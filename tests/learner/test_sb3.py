"""The SB3 algorithms' loop (`llmrl.learner.algorithms.sb3`): a version every `checkpoint_every`
timesteps, a line that resumes where it stopped and ends as an uninterrupted run would,
fine-tuning from another checkpoint's weights, state kept beside the model, and settings
checked by their pydantic models (SB3's defaults, each bad key named)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces

from llmrl.common.registry import registry
from llmrl.learner.algorithms.sb3 import BUFFER_FILE, MODEL_FILE, RANDOM_STATE_FILE
from llmrl.learner.algorithms.sb3_settings import SETTINGS
from llmrl.learner.versions import Versions

LENGTH = 8  # steps per episode: a rollout of PPO (n_steps 8) ends with every episode
PPO = {"n_steps": LENGTH, "batch_size": 8, "n_epochs": 2, "policy_kwargs": {"net_arch": [16]}}
DQN = {"learning_starts": 8, "buffer_size": 200, "batch_size": 8, "train_freq": 1}
DQN |= {"target_update_interval": 16, "policy_kwargs": {"net_arch": [16]}}


class Alternate(gymnasium.Env):
    """Press the button the step's parity asks for, 8 steps an episode. Deterministic: a run
    resumed at an episode boundary sees what an uninterrupted one sees."""

    observation_space = spaces.Box(0.0, 1.0, (LENGTH,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None):
        super().reset(seed=seed)
        self.t = 0
        return self._observation(), {}

    def step(self, action: int):
        reward = float(int(action) == self.t % 2)
        self.t += 1
        return self._observation(), reward, False, self.t >= LENGTH, {}

    def _observation(self) -> np.ndarray:
        observation = np.zeros(LENGTH, np.float32)
        observation[min(self.t, LENGTH - 1)] = 1.0
        return observation


def envs() -> Any:
    from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

    return VecMonitor(DummyVecEnv([Alternate, Alternate]))


def weights(line: Versions, version: str) -> dict[str, torch.Tensor]:
    return registry.get_algorithm("ppo").load(line.get(version)).policy.state_dict()


def assert_same(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> None:
    assert first.keys() == second.keys()
    for key, value in first.items():
        assert torch.equal(value, second[key]), key


def test_a_version_every_checkpoint_every_timesteps(tmp_path: Path):
    line = Versions(tmp_path / "line")
    ppo = registry.get_algorithm("ppo")
    last = ppo.train(envs(), line, total_timesteps=64, checkpoint_every=16, seed=1, **PPO)
    assert line.versions() == ["1", "2", "3", "4"] and last == line.latest()
    saved = [line.get(v) for v in line.versions()]
    assert [c.result["timesteps"] for c in saved] == [16, 32, 48, 64]
    # 16 samples, 2 mini-batches of 8, 2 epochs: 4 optimizer steps per rollout
    assert [c.result["gradient_steps"] for c in saved] == [4, 8, 12, 16]
    assert all((c.path / MODEL_FILE).is_file() for c in saved)
    assert all((c.path / RANDOM_STATE_FILE).is_file() for c in saved)
    assert last.config["checkpoint_every"] == 16 and last.config["n_steps"] == LENGTH
    # periodic versions change nothing of PPO's training: one run without them is the same
    once = ppo.train(envs(), tmp_path / "once", total_timesteps=64, seed=1, **PPO)
    assert Versions(once.path.parent).versions() == ["1"]
    assert_same(weights(line, "4"), weights(Versions(once.path.parent), "1"))


def test_training_without_tensorboard_writes_nothing_outside_its_line(tmp_path, monkeypatch):
    """SB3's own logger would make an SB3-<time> folder in the temp dir at every learn call
    (one per version here); the algorithm's writes nothing but the line."""
    import torch._dynamo  # noqa: F401 - torch makes its compile cache folder in the temp dir
    # the first time this is imported (Adam's constructor does): not the algorithm's write

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    ppo = registry.get_algorithm("ppo")
    ppo.train(envs(), tmp_path / "line", total_timesteps=32, checkpoint_every=16, seed=1, **PPO)
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize(("name", "settings"), [("ppo", PPO), ("dqn", DQN)])
def test_a_resumed_line_ends_as_an_uninterrupted_run(name: str, settings: dict, tmp_path: Path):
    algorithm = registry.get_algorithm(name)
    common = {"checkpoint_every": 32, "seed": 3, **settings}
    whole = Versions(tmp_path / "whole")
    algorithm.train(envs(), whole, total_timesteps=64, **common)

    parts = Versions(tmp_path / "parts")
    algorithm.train(envs(), parts, total_timesteps=32, **common)
    torch.manual_seed(99)  # another process's generators: the saved ones are restored
    np.random.seed(99)
    reported: list[int] = []
    resumed = algorithm.train(
        envs(), parts, on_progress=reported.append, total_timesteps=64, **common
    )
    assert parts.versions() == ["1", "2"] and resumed.result["timesteps"] == 64
    assert sum(reported) == 32  # the timesteps it added
    assert resumed.result["gradient_steps"] == whole.get("2").result["gradient_steps"]
    first = algorithm.load(whole.get("2")).policy.state_dict()
    assert_same(first, algorithm.load(resumed).policy.state_dict())
    if name == "dqn":
        assert (resumed.path / BUFFER_FILE).is_file()

    # a line at its budget is returned as it is
    reported.clear()
    again = algorithm.train(
        envs(), parts, on_progress=reported.append, total_timesteps=64, **common
    )
    assert again == resumed and sum(reported) == 0 and parts.versions() == ["1", "2"]


def test_extra_state_is_saved_in_every_version_and_read_back_on_resume(tmp_path: Path):
    class Counter:
        def __init__(self) -> None:
            self.saves, self.loaded = 0, None

        def save(self, directory: Path) -> None:
            self.saves += 1
            (directory / "counter.txt").write_text(str(self.saves))

        def load(self, directory: Path) -> None:
            self.loaded = int((directory / "counter.txt").read_text())

    ppo = registry.get_algorithm("ppo")
    line = Versions(tmp_path / "line")
    first = Counter()
    ppo.train(envs(), line, total_timesteps=32, checkpoint_every=16, extra_state=first, **PPO)
    assert first.saves == 2 and first.loaded is None
    assert [(line.root / v / "counter.txt").read_text() for v in line.versions()] == ["1", "2"]
    second = Counter()
    ppo.train(envs(), line, total_timesteps=48, extra_state=second, **PPO)
    assert second.loaded == 2 and second.saves == 1


def test_init_from_starts_a_fresh_line_from_a_checkpoints_weights(tmp_path: Path):
    ppo = registry.get_algorithm("ppo")
    pretrained = ppo.train(envs(), tmp_path / "pretrained", total_timesteps=32, seed=1, **PPO)
    frozen = {**PPO, "learning_rate": 0.0}
    tuned = ppo.train(
        envs(), tmp_path / "tuned", init_from=pretrained.path, total_timesteps=16, **frozen
    )
    assert tuned.version == "1" and tuned.result["timesteps"] == 16  # its own count
    assert tuned.result["gradient_steps"] == 4 and tuned.config["init_from"] == str(pretrained.path)
    before = ppo.load(pretrained).policy.state_dict()
    assert_same(before, ppo.load(tuned).policy.state_dict())  # a learning rate of 0
    # resumed, the line goes on from its own version and still names where it started
    more = ppo.train(
        envs(), tmp_path / "tuned", init_from=pretrained.path, total_timesteps=32, **frozen
    )
    assert more.version == "2" and more.result["timesteps"] == 32
    assert more.config["init_from"] == str(pretrained.path)

    dqn = registry.get_algorithm("dqn").train(envs(), tmp_path / "dqn", total_timesteps=16, **DQN)
    with pytest.raises(ValueError, match=r"init_from: .* written by 'dqn', not 'ppo'"):
        ppo.train(envs(), tmp_path / "wrong", init_from=dqn.path, total_timesteps=16, **PPO)
    assert not (tmp_path / "wrong").exists()


@pytest.mark.parametrize(
    ("name", "settings", "message"),
    [
        ("ppo", {"n_steps": 0}, "ppo: n_steps: Input should be greater than 0 (got 0)"),
        ("ppo", {"gamma": 1.5}, "ppo: gamma: Input should be less than or equal to 1"),
        ("ppo", {"learning_rate": float("nan")}, "ppo: learning_rate: Input should be a finite"),
        ("ppo", {"clip_range": True}, "ppo: clip_range: Input should be a valid number"),
        ("ppo", {"target_kl": -1.0}, "ppo: target_kl: Input should be greater than 0"),
        ("ppo", {"n_stepz": 8}, "ppo: n_stepz: unknown setting; allowed: gamma, "),
        ("ppo", {"seed": -1}, "ppo: seed: Input should be greater than or equal to 0"),
        ("ppo", {"checkpoint_every": 0}, "ppo: checkpoint_every: Input should be greater"),
        ("a2c", {"rms_prop_eps": 0.0}, "a2c: rms_prop_eps: Input should be greater than 0"),
        ("dqn", {"exploration_final_eps": 2.0}, "dqn: exploration_final_eps: Input should be"),
        ("dqn", {"train_freq": "often"}, "dqn: train_freq"),
    ],
)
def test_a_bad_setting_is_refused_naming_its_key(
    name: str, settings: dict, message: str, tmp_path: Path
):
    with pytest.raises(ValueError) as refused:
        registry.get_algorithm(name).train(envs(), tmp_path / "line", **settings)
    assert str(refused.value).startswith(message)
    assert not (tmp_path / "line").exists()


def test_the_settings_models_take_every_sb3_argument_with_its_default():
    owned = {"self", "policy", "env", "seed", "device", "verbose", "tensorboard_log"}
    owned |= {"rollout_buffer_class", "replay_buffer_class"}  # classes: no config names one
    for name, model in SETTINGS.items():
        from llmrl.learner.algorithms.sb3 import _algorithm_class

        parameters = inspect.signature(_algorithm_class(name).__init__).parameters
        arguments = {k: p for k, p in parameters.items() if k not in owned and k[0] != "_"}
        assert set(model.model_fields) == set(arguments), name
        for key, parameter in arguments.items():
            assert model.model_fields[key].default == parameter.default, f"{name}.{key}"
            assert model.model_fields[key].description, f"{name}.{key}"
    # a DQN train_freq given as a JSON list is SB3's (count, unit) tuple
    assert SETTINGS["dqn"].model_validate({"train_freq": [2, "episode"]}).train_freq == (
        2,
        "episode",
    )


@pytest.mark.parametrize("name, settings, eps", [("ppo", PPO, 1e-5), ("dqn", DQN, 1e-8)])
def test_the_fused_adam_kernel_reaches_sb3s_optimiser_with_its_defaults(
    name: str, settings: dict, eps: float, tmp_path: Path, monkeypatch
):
    """Under LLMRL_ADAM=fused PPO's and DQN's Adam is torch's fused kernel, with the eps SB3
    gives each (1e-5 for the actor-critic policies, Adam's own for DQN), and the saved model
    builds it again; under torch's own kernel nothing reaches SB3."""
    from llmrl.learner.algorithms.sb3 import with_adam_kernel

    algorithm = registry.get_algorithm(name)
    monkeypatch.setenv("LLMRL_ADAM", "torch")
    plain = algorithm.train(envs(), tmp_path / "plain", total_timesteps=16, seed=1, **settings)
    assert not algorithm.load(plain).policy.optimizer.defaults["fused"]
    monkeypatch.setenv("LLMRL_ADAM", "fused")
    fused = algorithm.train(envs(), tmp_path / "fused", total_timesteps=16, seed=1, **settings)
    optimiser = algorithm.load(fused).policy.optimizer
    assert isinstance(optimiser, torch.optim.Adam)
    assert optimiser.defaults["fused"] is True and optimiser.defaults["eps"] == eps
    # A2C's RMSprop, and a policy's own optimiser, are left as given
    assert with_adam_kernel("a2c", {}) == {}
    own = {"policy_kwargs": {"optimizer_class": torch.optim.SGD}}
    assert with_adam_kernel("ppo", own) == own
    adam_a2c = with_adam_kernel("a2c", {"use_rms_prop": False})
    assert adam_a2c["policy_kwargs"]["optimizer_kwargs"] == {"eps": 1e-5, "fused": True}
