"""Stable-Baselines3 PPO and DQN on any VecEnv (simulator worlds, mediators...).

One entry point, `train_sb3`, so every recipe trains the same way: seeded, TensorBoard
scalars under CleanRL's names (`charts/episodic_return`, `charts/SPS`, `losses/...`), and a
saved, versioned checkpoint. SB3's own logger writes `rollout/ep_rew_mean` and `train/...`;
the callback below adds the CleanRL names beside them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmrl.common.registry import registry

ALGORITHMS = ("ppo", "dqn")


def _algorithm_class(name: str) -> Any:
    from stable_baselines3 import DQN, PPO

    classes = {"ppo": PPO, "dqn": DQN}
    if name not in classes:
        raise ValueError(f"unknown SB3 algorithm {name!r}; choose one of {', '.join(classes)}")
    return classes[name]


def _cleanrl_callback(
    on_progress: Callable[[int], None] | None,
    on_episode: Callable[[int, dict[str, Any]], None] | None,
) -> Any:
    from stable_baselines3.common.callbacks import BaseCallback

    class CleanRLScalars(BaseCallback):
        """Episode returns, SPS and losses under CleanRL's names; reports progress."""

        def _on_training_start(self) -> None:
            self._start = time.perf_counter()
            self._last = 0

        def _on_step(self) -> bool:
            for info in self.locals.get("infos", []):
                episode = info.get("episode")
                if isinstance(episode, dict):
                    if on_episode is not None:
                        on_episode(self.num_timesteps, episode)
                    self.logger.record_mean("charts/episodic_return", episode.get("env_return", 0))
                    self.logger.record_mean("charts/episodic_length", episode.get("length", 0))
                    if "queries" in episode:
                        self.logger.record_mean("charts/queries", episode["queries"])
            if on_progress is not None:
                on_progress(self.num_timesteps - self._last)
                self._last = self.num_timesteps
            return True

        def _on_rollout_end(self) -> None:
            elapsed = max(time.perf_counter() - self._start, 1e-9)
            self.logger.record("charts/SPS", int(self.num_timesteps / elapsed))
            for key, value in list(self.logger.name_to_value.items()):
                if key.startswith("train/") and key.endswith("loss"):
                    self.logger.record("losses/" + key.split("/", 1)[1], value)

    return CleanRLScalars()


@registry.register_algorithm("ppo", "Stable-Baselines3 PPO on a VecEnv")
@registry.register_algorithm("dqn", "Stable-Baselines3 DQN on a VecEnv")
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
    """Train an SB3 model on `vec_env`; saves it to `save_path` (a .zip) when given.

    `on_progress(n)` is called with the timesteps done since its last call (progress bars);
    `on_episode(timestep, info["episode"])` for every finished episode (learning curves).
    """
    cls = _algorithm_class(algorithm)
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
    return model


def load_sb3(path: str | Path, algorithm: str = "ppo") -> Any:
    return _algorithm_class(algorithm).load(str(path), device="cpu")
