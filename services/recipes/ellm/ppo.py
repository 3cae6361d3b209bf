"""PPO (Stable-Baselines3) as ELLM's second learner, beside `dqn-ellm`.

* `EllmVecEnv`: an SB3 `VecEnv` over `IntrinsicRewardWrapper`. The wrapper is a gymnasium
  vector env with NEXT_STEP autoreset; SB3 wants same-step autoreset (the step that ends an
  episode returns the next episode's first observation, the last one in
  `infos[i]["terminal_observation"]`). The adapter asks the wrapper to `restart` the ended
  envs at once (the world steps only them), so no env takes an extra step and every step is
  a frame of every env. Finished episodes come as `infos[i]["episode"]` (SB3's `r`, `l` and
  the wrapper's own figures: achievements, intrinsic/task returns).
* `train_ppo_ellm`: `MultiInputPolicy` PPO on the same numeric observations and crafter's 17
  actions; a checkpoint version (SB3's `model.zip`, saved as the learner's algorithm `ppo`,
  plus the reward source's state) every `checkpoint_every` frames; a line with versions
  continues from the latest (`PPO.load`), and `init_from` starts a fresh line from a
  pretrained PPO's weights (fine-tuning). Frames are SB3's timesteps (env steps over all envs);
  PPO stops at the first rollout boundary at or past the budget, so `n_steps` is capped at
  the budget per env.
* `PpoPolicy`: a loaded PPO acting on batches of observations (`act`, as `DqnPolicy`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ALGORITHM = "ppo"  # the learner's registered SB3 algorithm: its `load` reads our versions
MODEL_FILE = "model.zip"  # as llmrl.learner.algorithms.sb3
SOURCE_FILE = "reward_source.pt"  # RND/kNN networks and memory (resume)
POLICY = "MultiInputPolicy"
# PPO settings a job sets itself (or that would break the loop), never a job's `ppo` key
JOB_OWNED_PPO_SETTINGS = {"env", "policy", "seed", "device", "verbose", "tensorboard_log"}
# defaults for Crafter (smaller than SB3's 2048-step rollouts: budgets here are small)
PPO_DEFAULTS: dict[str, Any] = {"n_steps": 128, "batch_size": 256, "learning_rate": 3e-4}
CHECKPOINT_EVERY = 20_000
# PPO's float settings: key -> (must be > 0, at most 1, may be None)
PPO_NUMBERS = {
    "learning_rate": (False, False, False),
    "gamma": (False, True, False),
    "gae_lambda": (False, True, False),
    "clip_range": (True, False, False),
    "clip_range_vf": (True, False, True),
    "ent_coef": (False, False, False),
    "vf_coef": (False, False, False),
    "max_grad_norm": (True, False, False),
    "target_kl": (True, False, True),
}
SB3_KEYS = ("r", "l", "env_return")  # an episode's entries for SB3's logs, not episodes.jsonl


def ppo_setting_names() -> list[str]:
    """The PPO keyword arguments a job may set (SB3's own names)."""
    from llmrl.learner.algorithms.sb3 import hyperparameter_names

    return sorted(set(hyperparameter_names(ALGORITHM)) - JOB_OWNED_PPO_SETTINGS)


def check_ppo_settings(values: dict[str, Any]) -> dict[str, Any]:
    """Unknown keys are errors naming `ppo.<key>`; the counts and numbers are checked here
    (SB3 would only fail on them with an assertion once the job runs), the rest by SB3."""
    from llmrl.learner.algorithms.base import check_number

    known = ppo_setting_names()
    for key in values:
        if key not in known:
            raise ValueError(
                f"ppo.{key}: not a PPO setting a job may set; known: {', '.join(known)}"
            )
    for key in ("n_steps", "batch_size", "n_epochs"):
        value = values.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ValueError(f"ppo.{key}: expected a positive integer, got {value!r}")
    for key, (positive, fraction, optional) in PPO_NUMBERS.items():
        if key not in values or (optional and values[key] is None):
            continue
        value = values[key]
        check_number(f"ppo.{key}", value, positive=positive)
        if fraction and value > 1:
            raise ValueError(f"ppo.{key}: expected a number in [0, 1], got {value!r}")
    return values


def rollout_sizes(
    ppo: dict[str, Any], frames: int, num_envs: int, frames_key: str = "frames"
) -> tuple[int, int]:
    """PPO's `n_steps` and `batch_size` for `frames` over `num_envs` envs: PPO stops at a
    rollout boundary, so a rollout longer than the budget would overshoot it, and a mini-batch
    holds at most the rollout. SB3 asserts on fewer than 2 samples when it normalises
    advantages: the error names the key to raise instead."""
    settings = {**PPO_DEFAULTS, **ppo}
    n_steps = max(1, min(settings["n_steps"], math.ceil(frames / num_envs)))
    rollout = n_steps * num_envs
    batch_size = max(1, min(settings["batch_size"], rollout))
    if settings.get("normalize_advantage", True):
        if rollout < 2:
            key = "ppo.n_steps" if settings["n_steps"] < 2 else frames_key
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


def _save(
    line: Any, model: Any, wrapper: Any, settings: dict[str, Any], gradient_steps: int
) -> Any:
    import torch

    def write(directory: Path) -> None:
        model.save(str(directory / MODEL_FILE))
        if hasattr(wrapper, "state_dict"):
            torch.save(wrapper.state_dict(), directory / SOURCE_FILE)

    frames = int(model.num_timesteps)
    result = {"global_step": frames, "timesteps": frames, "gradient_steps": gradient_steps}
    return line.save(write, ALGORITHM, None, config=settings, result=result)


def train_ppo_ellm(
    wrapper: Any,
    line: Any,
    *,
    total_timesteps: int,
    seed: int = 0,
    tensorboard_dir: str | None = None,
    init_from: str | Path | None = None,
    checkpoint_every: int = CHECKPOINT_EVERY,
    on_progress: Callable[[int], None] | None = None,
    on_step: Callable[[int, dict[str, Any]], None] | None = None,
    **ppo: Any,
) -> Any:
    """PPO on `wrapper` (an `IntrinsicRewardWrapper`) into the `Versions` line `line`;
    `on_step(frames, {"episodes": [...]})` for the episodes that ended at each step (as
    dqn-ellm's hook). Returns the last checkpoint."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    from llmrl.common import trusted
    from llmrl.learner.algorithms.base import resumable_version
    from llmrl.learner.algorithms.sb3 import _cleanrl_callback
    from llmrl.learner.versions import find_checkpoint

    check_ppo_settings(ppo)
    settings = {**PPO_DEFAULTS, **ppo}
    n_steps, batch_size = rollout_sizes(ppo, total_timesteps, wrapper.num_envs)
    settings.update(n_steps=n_steps, batch_size=batch_size)
    vec_env = make_vec_env(wrapper)
    previous = resumable_version(line, ALGORITHM, MODEL_FILE)
    common = {"device": "cpu", "tensorboard_log": tensorboard_dir}
    if previous is not None:
        # this job's settings, as for init_from: a resubmitted job's changes are not ignored
        resumed = trusted.require_file(previous.path / MODEL_FILE, "model_path")
        model = PPO.load(str(resumed), env=vec_env, **common, **settings)
        if (previous.path / SOURCE_FILE).is_file():
            wrapper.load_state_dict(torch.load(previous.path / SOURCE_FILE, weights_only=True))
        if model.num_timesteps >= total_timesteps:
            return previous
    elif init_from is not None:  # fine-tuning: the pretrained weights, a fresh line
        start = find_checkpoint(init_from)
        if start.algorithm != ALGORITHM:
            raise ValueError(
                f"init_from: {start.path} was trained by {start.algorithm}, not {ALGORITHM} "
                "(fine-tune with the agent that pretrained it)"
            )
        pretrained = trusted.require_file(start.path / MODEL_FILE, "init_from")
        model = PPO.load(str(pretrained), env=vec_env, **common, **settings)
        model.num_timesteps = 0
    else:
        model = PPO(POLICY, vec_env, seed=seed, verbose=0, **common, **settings)
    if previous is None:
        model.set_random_seed(seed)
        vec_env.seed(seed)

    class Episodes(BaseCallback):
        """Finished episodes to `on_step`, frames done to `on_progress` (counted from where
        each `learn` call starts: SB3's timesteps go on across calls)."""

        def _on_training_start(self) -> None:
            self.reported = int(self.model.num_timesteps)

        def _on_step(self) -> bool:
            if on_progress is not None:
                on_progress(self.num_timesteps - self.reported)
                self.reported = self.num_timesteps
            if on_step is not None:
                episodes = [i["episode"] for i in self.locals["infos"] if "episode" in i]
                episodes = [{k: v for k, v in e.items() if k not in SB3_KEYS} for e in episodes]
                on_step(self.num_timesteps, {"episodes": episodes})
            return True

    # optimizer steps, counted as they happen (SB3's _n_updates counts PPO's epochs, and
    # target_kl may stop an epoch early); a resumed line goes on from its version's count
    gradient_steps = [int(previous.result.get("gradient_steps", 0)) if previous else 0]

    def count_step(*_: Any) -> None:
        gradient_steps[0] += 1

    model.policy.optimizer.register_step_post_hook(count_step)
    checkpoint = previous
    while model.num_timesteps < total_timesteps:
        chunk = min(checkpoint_every, total_timesteps - model.num_timesteps)
        model.learn(
            total_timesteps=chunk,
            callback=[Episodes(), _cleanrl_callback(None, None)],
            reset_num_timesteps=False,
            tb_log_name="ppo",
        )
        checkpoint = _save(line, model, wrapper, {**settings, "seed": seed}, gradient_steps[0])
    return checkpoint


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
