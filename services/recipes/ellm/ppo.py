"""PPO (Stable-Baselines3) as ELLM's second learner, beside `dqn-ellm`.

* `EllmVecEnv`: an SB3 `VecEnv` over `IntrinsicRewardWrapper`. The wrapper is a gymnasium
  vector env with NEXT_STEP autoreset; SB3 wants same-step autoreset (the step that ends an
  episode returns the next episode's first observation, the last one in
  `infos[i]["terminal_observation"]`). The adapter asks the wrapper to `restart` the ended
  envs at once (the world steps only them), so no env takes an extra step and every step is
  a frame of every env. Finished episodes come as `infos[i]["episode"]` (SB3's `r`, `l` and
  the wrapper's own figures: achievements, intrinsic/task returns).
* `EllmPpoSettings`: SB3 PPO's settings (`ppo.<key>` of the recipe and its jobs) with ELLM's
  own defaults; `rollout_sizes` fits a rollout and a mini-batch to a frame budget.
* `train_ppo_ellm`: the learner's `ppo` with `MultiInputPolicy` on the same numeric
  observations and crafter's 17 actions: a checkpoint version (SB3's `model.zip` and the
  reward source's state) every `checkpoint_every` frames; a line with versions continues from
  the latest, and `init_from` starts a fresh line from a pretrained PPO's weights
  (fine-tuning). Frames are SB3's timesteps (env steps over all envs); PPO stops at the first
  rollout boundary at or past the budget, so `n_steps` is capped at the budget per env.
* `PpoPolicy`: a loaded PPO acting on batches of observations (`act`, as `DqnPolicy`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, model_serializer

from llmrl.common.bounds import Batch, RolloutSteps
from llmrl.learner.algorithms.sb3_settings import LearningRate, PpoSettings
from llmrl.learner.versions import Checkpoint, Versions

ALGORITHM = "ppo"  # the learner's registered SB3 algorithm: its `load` reads our versions
SOURCE_FILE = "reward_source.pt"  # RND/kNN networks and memory (resume)
POLICY = "MultiInputPolicy"
CHECKPOINT_EVERY = 20_000
SB3_KEYS = ("r", "l", "env_return")  # an episode's entries for SB3's logs, not episodes.jsonl


class EllmPpoSettings(PpoSettings):
    """SB3 PPO's settings with ELLM's defaults for Crafter: rollouts of 128 steps and
    mini-batches of 256 (SB3's 2048-step rollouts outgrow the budgets here), Adam 3e-4.

    It dumps as written (the keys set, not the defaults): a config's `ppo: {n_steps: 64}`,
    the configs runs store and a job's body read as the user gave them."""

    learning_rate: LearningRate = Field(3e-4, description="Adam learning rate (ELLM: 3e-4)")
    n_steps: RolloutSteps = Field(128, gt=0, description="steps per env per rollout (ELLM: 128)")
    batch_size: Batch = Field(256, gt=0, description="samples per mini-batch (ELLM: 256)")

    @model_serializer(mode="wrap")
    def _as_written(self, handler: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if k in self.model_fields_set}


def rollout_sizes(
    ppo: EllmPpoSettings, frames: int, num_envs: int, frames_key: str = "frames"
) -> tuple[int, int]:
    """PPO's `n_steps` and `batch_size` for `frames` over `num_envs` envs: PPO stops at a
    rollout boundary, so a rollout longer than the budget would overshoot it, and a mini-batch
    holds at most the rollout. SB3 asserts on fewer than 2 samples when it normalises
    advantages: the error names the key to raise instead."""
    n_steps = max(1, min(ppo.n_steps, math.ceil(frames / num_envs)))
    rollout = n_steps * num_envs
    batch_size = max(1, min(ppo.batch_size, rollout))
    if ppo.normalize_advantage:
        if rollout < 2:
            key = "ppo.n_steps" if ppo.n_steps < 2 else frames_key
            raise ValueError(
                f"{key}: a PPO rollout of {rollout} sample (n_steps {n_steps} x {num_envs} "
                f"env, {frames_key} {frames}); PPO normalises advantages over at least 2: raise "
                f"{frames_key}, num_envs or ppo.n_steps (or set ppo.normalize_advantage: false)"
            )
        if batch_size < 2:
            raise ValueError(
                f"ppo.batch_size: expected at least 2 (PPO normalises advantages over each "
                f"mini-batch; or set ppo.normalize_advantage: false), got {batch_size}"
            )
    return n_steps, batch_size


def make_vec_env(wrapper: Any) -> Any:
    """The SB3 VecEnv over an `IntrinsicRewardWrapper` (SB3 is imported only here)."""
    from llmrl.simulator.sb3_vec_env import BatchVecEnv

    class EllmVecEnv(BatchVecEnv):
        """Same-step autoreset over the wrapper (see module docstring)."""

        envs_name = "the ELLM envs"

        def __init__(self, envs: Any) -> None:
            self.envs = envs
            self._actions: np.ndarray | None = None
            super().__init__(envs.num_envs, envs.single_observation_space, envs.single_action_space)

        def reset(self) -> dict[str, np.ndarray]:
            observations, _ = self.envs.reset(seed=self._reset_seed())
            return observations

        def step_async(self, actions: np.ndarray) -> None:
            self._actions = np.asarray(actions).reshape(self.num_envs)

        def step_wait(self) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, list[dict]]:
            observations, rewards, terminated, truncated, info = self.envs.step(self._actions)
            dones = np.asarray(terminated | truncated, dtype=bool)
            infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
            for episode in info.get("episodes", []):
                i = episode["env"]
                figures = {key: value for key, value in episode.items() if key != "env"}
                total = figures["intrinsic_return"] + figures["task_return"]
                total += self.envs.extrinsic_scale * figures["extrinsic_return"]
                # env_return: the env's own return (crafter's reward), charts/episodic_return
                env_return = figures["extrinsic_return"]
                infos[i]["episode"] = {
                    "r": total,
                    "l": figures["length"],
                    "env_return": env_return,
                    **figures,
                }
            if dones.any():
                restarted = self.envs.restart(dones)
                for i in np.flatnonzero(dones):
                    final = {key: np.array(value[i]) for key, value in observations.items()}
                    infos[i]["terminal_observation"] = final
                    infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
                observations = {
                    key: np.where(_rows(dones, value), restarted[key], value)
                    for key, value in observations.items()
                }
            return observations, np.asarray(rewards, np.float32), dones, infos

        def close(self) -> None:
            self.envs.close()

    return EllmVecEnv(wrapper)


def _rows(mask: np.ndarray, value: np.ndarray) -> np.ndarray:
    """`mask` shaped to broadcast over the rows of `value`."""
    return mask.reshape(-1, *([1] * (np.ndim(value) - 1)))


class RewardSourceState:
    """The reward source's networks and memory (RND, kNN), kept in every version beside the
    model and read back when a line resumes (`sb3.ExtraState`)."""

    def __init__(self, wrapper: Any) -> None:
        self.wrapper = wrapper

    def save(self, directory: Path) -> None:
        import torch

        if hasattr(self.wrapper, "state_dict"):
            torch.save(self.wrapper.state_dict(), directory / SOURCE_FILE)

    def load(self, directory: Path) -> None:
        import torch

        if (directory / SOURCE_FILE).is_file():
            self.wrapper.load_state_dict(torch.load(directory / SOURCE_FILE, weights_only=True))


def train_ppo_ellm(
    wrapper: Any,
    line: Versions,
    *,
    total_timesteps: int,
    seed: int = 0,
    tensorboard_dir: str | None = None,
    init_from: str | Path | None = None,
    checkpoint_every: int = CHECKPOINT_EVERY,
    on_progress: Callable[[int], None] | None = None,
    on_step: Callable[[int, dict[str, Any]], None] | None = None,
    ppo: EllmPpoSettings | None = None,
) -> Checkpoint:
    """PPO on `wrapper` (an `IntrinsicRewardWrapper`) into the `Versions` line `line`;
    `on_step(frames, {"episodes": [...]})` for the episodes that ended at each step (as
    dqn-ellm's hook). Returns the last checkpoint."""
    from llmrl.common.registry import registry

    ppo = ppo or EllmPpoSettings()
    n_steps, batch_size = rollout_sizes(ppo, total_timesteps, wrapper.num_envs)
    settings = {**ppo.model_dump(), "learning_rate": ppo.learning_rate}
    settings.update(n_steps=n_steps, batch_size=batch_size)

    return registry.get_algorithm(ALGORITHM).train(
        make_vec_env(wrapper),
        line,
        on_progress=on_progress,
        on_step=_episodes_hook(on_step) if on_step is not None else None,
        total_timesteps=total_timesteps,
        seed=seed,
        policy=POLICY,
        tensorboard_dir=tensorboard_dir,
        init_from=init_from,
        checkpoint_every=checkpoint_every,
        reseed=True,  # ELLM's runs seed again once the weights are set, fresh or pretrained
        extra_state=RewardSourceState(wrapper),
        **settings,
    )


def _episodes_hook(on_step: Callable[[int, dict[str, Any]], None]) -> Any:
    """SB3's step hook (`on_step(frames, infos)`) as dqn-ellm's: the episodes that ended, each
    with its own figures (not the entries SB3's logs read)."""

    def hook(frames: int, infos: list[dict[str, Any]]) -> None:
        ended = [info["episode"] for info in infos if "episode" in info]
        figures = [{k: v for k, v in e.items() if k not in SB3_KEYS} for e in ended]
        on_step(frames, {"episodes": figures})

    return hook


class PpoPolicy:
    """A loaded PPO: `act(observations, epsilon, rng)` on a batch of Dict observations (the
    policy's sampled action; with probability `epsilon` a uniform one, as `DqnPolicy`). The
    action is drawn with `rng` from the policy's probabilities, not by SB3's `predict`, which
    samples with torch's global generator: an evaluation seeded by its rng repeats exactly."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.keys = sorted(model.observation_space.spaces)
        self.num_actions = int(model.action_space.n)

    def act(
        self,
        observations: dict[str, Any],
        epsilon: float = 0.0,
        rng: np.random.Generator | None = None,
    ) -> np.ndarray:
        import torch

        rng = rng or np.random.default_rng()
        batch = {key: np.asarray(observations[key]) for key in self.keys}
        policy = self.model.policy
        policy.set_training_mode(False)
        tensors, _ = policy.obs_to_tensor(batch)
        with torch.no_grad():
            probs = policy.get_distribution(tensors).distribution.probs.cpu().numpy()
        cumulative = np.cumsum(probs.astype(np.float64), axis=1)
        drawn = rng.random(len(cumulative))[:, None] * cumulative[:, -1:]
        actions = np.minimum((cumulative <= drawn).sum(axis=1), self.num_actions - 1)
        if epsilon <= 0:
            return actions
        random = rng.integers(0, self.num_actions, size=len(actions))
        return np.where(rng.random(len(actions)) < epsilon, random, actions)


def load_policy(checkpoint: str | Path) -> PpoPolicy:
    from llmrl.learner.algorithms import load_cached

    return PpoPolicy(load_cached(ALGORITHM, checkpoint))
