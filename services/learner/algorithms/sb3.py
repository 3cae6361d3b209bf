"""Stable-Baselines3 on any VecEnv (simulator worlds, mediators...): two families.

* on-policy, `ppo` and `a2c`: learn from the rollouts of the current policy;
* off-policy, `dqn`: learns from a replay buffer of past transitions.

Both learn from an env (`source`: a VecEnv whose action space the algorithm supports) and
save a checkpoint version holding `model.zip` (SB3's own file). `train_sb3` is the loop they
share, so every recipe trains the same way: seeded, TensorBoard scalars under CleanRL's names
(`charts/episodic_return`, `charts/SPS`, `losses/...`) beside SB3's own (`rollout/ep_rew_mean`,
`train/...`). Stable-Baselines3 is imported when an algorithm trains or loads, not before.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from llmrl.common import trusted
from llmrl.common.registry import registry
from llmrl.learner.algorithms.base import Algorithm, Progress
from llmrl.learner.versions import Checkpoint, Versions, as_versions, find_checkpoint

ALGORITHMS = ("ppo", "a2c", "dqn")
MODEL_FILE = "model.zip"
LrSchedule = Literal["constant", "linear"]
# what train_sb3 sets itself: never a hyperparameter
_FIXED = {"self", "policy", "env", "seed", "device", "verbose", "tensorboard_log"}


def _algorithm_class(name: str) -> Any:
    from stable_baselines3 import A2C, DQN, PPO

    classes = {"ppo": PPO, "a2c": A2C, "dqn": DQN}
    if name not in classes:
        raise ValueError(f"unknown SB3 algorithm {name!r}; choose one of {', '.join(classes)}")
    return classes[name]


def hyperparameter_names(name: str) -> list[str]:
    """The keyword arguments SB3's class for `name` takes (learning_rate, n_steps...)."""
    parameters = inspect.signature(_algorithm_class(name).__init__).parameters
    return [p for p in parameters if p not in _FIXED and not p.startswith("_")]


def learning_rate_schedule(rate: float, schedule: LrSchedule = "constant") -> Any:
    """SB3's `learning_rate` argument: `rate` throughout ("constant"), or annealed linearly
    from `rate` at the first step to 0 at the last ("linear", CleanRL's `anneal_lr`), which
    lets PPO's last updates settle the policy instead of moving it as far as the first."""
    if schedule == "constant":
        return rate
    if schedule != "linear":
        raise ValueError(f"lr_schedule: expected constant or linear, got {schedule!r}")
    from stable_baselines3.common.utils import LinearSchedule

    return LinearSchedule(rate, 0.0, 1.0)


def _cleanrl_callback(
    on_progress: Callable[[int], None] | None,
    on_episode: Callable[[int, dict[str, Any]], None] | None,
) -> Any:
    from stable_baselines3.common.callbacks import BaseCallback

    class CleanRLScalars(BaseCallback):
        """Episode returns, SPS and losses under CleanRL's names; reports progress."""

        def _on_training_start(self) -> None:
            # a `learn` call that goes on (reset_num_timesteps=False) starts past 0: SPS and
            # progress count from there
            self._start = time.perf_counter()
            self._first = self._last = int(self.model.num_timesteps)

        def _on_step(self) -> bool:
            for info in self.locals.get("infos", []):
                episode = info.get("episode")
                if isinstance(episode, dict):
                    if on_episode is not None:
                        on_episode(self.num_timesteps, episode)
                    # the env's own return where the source keeps it apart from the reward
                    # trained on (when2ask's penalty, ELLM's intrinsic reward), else SB3's
                    env_return = episode.get("env_return", episode.get("r", 0))
                    self.logger.record_mean("charts/episodic_return", env_return)
                    length = episode.get("length", episode.get("l", 0))
                    self.logger.record_mean("charts/episodic_length", length)
                    if "queries" in episode:
                        self.logger.record_mean("charts/queries", episode["queries"])
            if on_progress is not None:
                on_progress(self.num_timesteps - self._last)
                self._last = self.num_timesteps
            return True

        def _on_rollout_end(self) -> None:
            elapsed = max(time.perf_counter() - self._start, 1e-9)
            self.logger.record("charts/SPS", int((self.num_timesteps - self._first) / elapsed))
            for key, value in list(self.logger.name_to_value.items()):
                if key.startswith("train/") and key.endswith("loss"):
                    self.logger.record("losses/" + key.split("/", 1)[1], value)

    return CleanRLScalars()


def train_sb3(
    vec_env: Any,
    algorithm: str = "ppo",
    total_timesteps: int = 50_000,
    seed: int = 0,
    tensorboard_dir: str | Path | None = None,
    save_path: str | Path | None = None,
    on_progress: Callable[[int], None] | None = None,
    on_episode: Callable[[int, dict[str, Any]], None] | None = None,
    policy: str = "MlpPolicy",
    **hyperparameters: Any,
) -> Any:
    """Train an SB3 model on `vec_env` and return it; saves it to `save_path` (a .zip) when
    given (the registered algorithms save versioned checkpoints instead).

    `on_progress(n)` is called with the timesteps done since its last call (progress bars);
    `on_episode(timestep, info["episode"])` for every finished episode (learning curves).
    """
    cls = _algorithm_class(algorithm)
    unknown = sorted(set(hyperparameters) - set(hyperparameter_names(algorithm)))
    if unknown:
        raise ValueError(
            f"{algorithm}: unknown hyperparameter(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(hyperparameter_names(algorithm))}"
        )
    model = cls(
        policy,
        vec_env,
        seed=seed,
        device="cpu",
        verbose=0,
        tensorboard_log=str(tensorboard_dir) if tensorboard_dir else None,
        **hyperparameters,
    )
    model.learn(
        total_timesteps=total_timesteps, callback=_cleanrl_callback(on_progress, on_episode)
    )
    if save_path is not None:
        Path(save_path).parent.mkdir(parents=True, exist_ok=True)
        model.save(str(save_path))
        trusted.record(save_path)
    return model


class SB3Algorithm(Algorithm):
    """An SB3 algorithm on a VecEnv. Settings: `total_timesteps`, `seed`, `policy` (SB3's
    policy class name, default "MlpPolicy"), `tensorboard_dir`, and the SB3 class's own
    hyperparameters (`learning_rate`, `n_steps`...)."""

    learns_from = "env"
    SETTINGS = ("total_timesteps", "seed", "policy", "tensorboard_dir")

    def __init__(self, name: str, family: str) -> None:
        self.name = name
        self.family = family  # one class, two families

    def train(
        self,
        source: Any,
        checkpoints: Versions | str | Path,
        *,
        version: str | int | None = None,
        on_progress: Progress | None = None,
        on_episode: Callable[[int, dict[str, Any]], None] | None = None,
        **settings: Any,
    ) -> Checkpoint:
        """Train on VecEnv `source`; `on_episode(timestep, episode)` for each finished one."""
        self.check_settings(settings, (*self.SETTINGS, *hyperparameter_names(self.name)))
        started = time.perf_counter()
        model = train_sb3(
            source, self.name, on_progress=on_progress, on_episode=on_episode, **settings
        )
        result = {"timesteps": int(model.num_timesteps), "seconds": time.perf_counter() - started}
        return as_versions(checkpoints).save(
            lambda directory: model.save(str(directory / MODEL_FILE)),
            self.name,
            version,
            config=settings,
            result=result,
        )

    def load(self, checkpoint: Checkpoint | str | Path) -> Any:
        """The SB3 model of a checkpoint; a bare `.zip` (saved by `train_sb3`) loads too."""
        path = checkpoint.path if isinstance(checkpoint, Checkpoint) else Path(checkpoint)
        if path.is_dir():
            found = find_checkpoint(path)
            self.check_written_by_me(found)
            path = found.path / MODEL_FILE
        elif path.name == MODEL_FILE and path.parent.is_dir():  # a checkpoint's own zip
            self.check_written_by_me(Checkpoint.read(path.parent))
        trusted.require_file(path)  # an SB3 zip is a pickle: only the project's own
        return _algorithm_class(self.name).load(str(path), device="cpu")


def model_file(checkpoint: Checkpoint) -> Path:
    """The SB3 model file of a checkpoint (what episode drivers' policy specs name)."""
    return checkpoint.path / MODEL_FILE


for _name, _family, _description in (
    ("ppo", "sb3-on-policy", "Stable-Baselines3 PPO on a VecEnv (discrete or Box actions)"),
    ("a2c", "sb3-on-policy", "Stable-Baselines3 A2C on a VecEnv (discrete or Box actions)"),
    ("dqn", "sb3-off-policy", "Stable-Baselines3 DQN on a VecEnv (discrete actions)"),
):
    registry.register_algorithm(_name, _description, family=_family, learns_from="env")(
        SB3Algorithm(_name, _family)
    )
