"""Stable-Baselines3 on any VecEnv (simulator worlds, mediators...): two families.

* on-policy, `ppo` and `a2c`: learn from the rollouts of the current policy;
* off-policy, `dqn`: learns from a replay buffer of past transitions.

Both learn from an env (`source`: a VecEnv whose action space the algorithm supports) into a
checkpoint line, the one loop every recipe trains with:

* a fresh model at `seed`, or the weights of another checkpoint of the same algorithm
  (`init_from`: fine-tuning, a fresh line and timestep count);
* a version every `checkpoint_every` timesteps and at the end: SB3's `model.zip` (weights,
  optimizer, timesteps), the random generators' states, DQN's replay buffer, and what the
  caller keeps beside them (`ExtraState`, e.g. ELLM's reward source). Each save ends one
  `learn(chunk, reset_num_timesteps=False)` call, so a run with periodic versions trains as
  the recipes' chunked loops always did;
* a line whose latest version this algorithm wrote goes on from it (`resume`): the saved
  timesteps, optimizer and generators, with fresh episodes (the envs are reset), up to
  `total_timesteps` (a line already there is returned as it is).

TensorBoard scalars under CleanRL's names (`charts/episodic_return`, `charts/SPS`,
`losses/...`) beside SB3's own (`rollout/ep_rew_mean`, `train/...`); each version's result
counts the optimizer steps taken (`gradient_steps`: PPO's `target_kl` may stop an epoch
early). The settings are SB3's own keyword arguments (`sb3_settings`). Stable-Baselines3 is
imported when an algorithm trains or loads, not before.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import Field

from llmrl.common import trusted
from llmrl.common.numerics import adam_options
from llmrl.common.registry import registry
from llmrl.learner.algorithms.base import (
    Algorithm,
    AlgorithmSettings,
    Progress,
    resumable_version,
    validate_settings,
)
from llmrl.learner.algorithms.sb3_settings import SETTINGS
from llmrl.learner.versions import Checkpoint, Versions, as_versions, find_checkpoint

ALGORITHMS = ("ppo", "a2c", "dqn")
MODEL_FILE = "model.zip"
RANDOM_STATE_FILE = "random_state.json"  # python, numpy, torch and action space generators
BUFFER_FILE = "replay_buffer.pkl"  # off-policy: SB3's pickled replay buffer
LrSchedule = Literal["constant", "linear"]
EpisodeHook = Callable[[int, dict[str, Any]], None]  # on_episode(timestep, info["episode"])
StepHook = Callable[[int, list[dict[str, Any]]], None]  # on_step(timestep, infos)


class ExtraState(Protocol):
    """What a caller trains beside the model and keeps in every version (ELLM's reward
    source): `save(directory)` writes it into a version being saved, `load(directory)` reads
    it back from the version a line resumes from."""

    def save(self, directory: Path) -> None: ...

    def load(self, directory: Path) -> None: ...


class Budget(AlgorithmSettings):
    """The loop's own settings (beside SB3's)."""

    total_timesteps: int = Field(gt=0, description="env steps to train for (all envs)")
    seed: int = Field(ge=0, description="seed of the weights, the sampling and the envs")
    checkpoint_every: int | None = Field(
        gt=0, description="timesteps between versions (None: one version, at the end)"
    )


def _algorithm_class(name: str) -> Any:
    from stable_baselines3 import A2C, DQN, PPO

    classes = {"ppo": PPO, "a2c": A2C, "dqn": DQN}
    if name not in classes:
        raise ValueError(f"unknown SB3 algorithm {name!r}; choose one of {', '.join(classes)}")
    return classes[name]


def with_adam_kernel(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` with the process's Adam kernel (`llmrl.common.numerics.adam_options`) in the
    policy's optimiser arguments, where the algorithm trains with SB3's Adam: PPO and DQN, and
    A2C told `use_rms_prop=False`; a policy given its own `optimizer_class` keeps it as given."""
    options = adam_options()
    uses_adam = name in ("ppo", "dqn") or (name == "a2c" and kwargs.get("use_rms_prop") is False)
    policy_kwargs = dict(kwargs.get("policy_kwargs") or {})
    if not options or not uses_adam or "optimizer_class" in policy_kwargs:
        return kwargs
    given = policy_kwargs.get("optimizer_kwargs")
    # SB3's actor-critic policies put eps=1e-5 in Adam's arguments only when none are given:
    # keep that default where ours are the only ones
    defaults = {"eps": 1e-5} if given is None and name in ("ppo", "a2c") else {}
    policy_kwargs["optimizer_kwargs"] = {**defaults, **options, **(given or {})}
    return {**kwargs, "policy_kwargs": policy_kwargs}


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


def _callback(
    on_progress: Progress | None, on_episode: EpisodeHook | None, on_step: StepHook | None
) -> Any:
    from stable_baselines3.common.callbacks import BaseCallback

    class CleanRLScalars(BaseCallback):
        """Episode returns, SPS and losses under CleanRL's names; the caller's hooks."""

        def _on_training_start(self) -> None:
            # every `learn` call but the first starts past 0: SPS and progress count from there
            self._start = time.perf_counter()
            self._first = self._last = int(self.model.num_timesteps)

        def _on_step(self) -> bool:
            infos = self.locals.get("infos", [])
            for info in infos:
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
            if on_step is not None:
                on_step(self.num_timesteps, infos)
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


class StepCounter:
    """Counts the optimizer's steps as they happen (a post-step hook): SB3's `_n_updates`
    counts PPO's epochs, and `target_kl` may stop one early."""

    def __init__(self, start: int) -> None:
        self.steps = start

    def __call__(self, *_: Any) -> None:
        self.steps += 1


# -- the random generators, saved so a resumed line samples as if it had never stopped ------
def random_states(model: Any) -> dict[str, Any]:
    import torch

    name, keys, position, has_gauss, gauss = np.random.get_state()
    version, state, gauss_next = random.getstate()
    return {
        "python": [version, list(state), gauss_next],
        "numpy": [name, keys.tolist(), position, has_gauss, gauss],
        "torch": torch.get_rng_state().tolist(),
        "action_space": model.action_space.np_random.bit_generator.state,
    }


def restore_random_states(model: Any, states: dict[str, Any]) -> None:
    import torch

    version, state, gauss_next = states["python"]
    random.setstate((version, tuple(state), gauss_next))
    name, keys, position, has_gauss, gauss = states["numpy"]
    np.random.set_state((name, np.array(keys, np.uint32), position, has_gauss, gauss))
    torch.set_rng_state(torch.tensor(states["torch"], dtype=torch.uint8))
    model.action_space.np_random.bit_generator.state = states["action_space"]


class SB3Algorithm(Algorithm):
    """An SB3 algorithm on a VecEnv (module docstring). Settings: SB3's keyword arguments
    (`sb3_settings.SETTINGS[name]`), beside the loop's own keywords of `train`."""

    learns_from = "env"

    def __init__(self, name: str, family: str) -> None:
        self.name = name
        self.family = family  # one class, two families
        self.settings_model = SETTINGS[name]  # SB3's own (`llmrl algorithms` lists them)

    def train(
        self,
        source: Any,
        checkpoints: Versions | str | Path,
        *,
        version: str | int | None = None,
        on_progress: Progress | None = None,
        on_episode: EpisodeHook | None = None,
        on_step: StepHook | None = None,
        total_timesteps: int = 50_000,
        seed: int = 0,
        policy: str | type = "MlpPolicy",
        tensorboard_dir: str | Path | None = None,
        init_from: Checkpoint | str | Path | None = None,
        checkpoint_every: int | None = None,
        resume: bool = True,
        reseed: bool = False,
        save_replay_buffer: bool = True,
        extra_state: ExtraState | None = None,
        **hyperparameters: Any,
    ) -> Checkpoint:
        """Train on VecEnv `source` into the line `checkpoints` (module docstring); returns
        the last version. `on_progress(n)`: n more timesteps; `on_episode(timestep, episode)`
        for each finished episode; `on_step(timestep, infos)` after every step of the envs.
        `policy`: SB3's policy name or class. `reseed`: seed the random generators again once
        the weights are set, so a fresh run and a fine-tuning one of a seed sample alike
        (ELLM's); by default SB3 seeds once, before drawing the weights. `resume=False`
        starts afresh in a line that has versions (a new version beside them)."""
        settings = validate_settings(self.name, SETTINGS[self.name], hyperparameters)
        budget = validate_settings(
            self.name,
            Budget,
            {
                "total_timesteps": total_timesteps,
                "seed": seed,
                "checkpoint_every": checkpoint_every,
            },
        )
        started = time.perf_counter()
        # the keys set, as validated (a schedule stays a callable); SB3's defaults for the rest
        given = settings.model_fields_set
        kwargs = with_adam_kernel(
            self.name,
            {key: getattr(settings, key) for key in type(settings).model_fields if key in given},
        )
        tensorboard_log = str(tensorboard_dir) if tensorboard_dir else None
        common = {"device": "cpu", "tensorboard_log": tensorboard_log}
        line = as_versions(checkpoints)
        previous = resumable_version(line, self.name, MODEL_FILE) if resume else None
        start = self._start(init_from) if init_from is not None and previous is None else None
        if previous is not None:
            origin = previous.config.get("init_from")  # what the line started from, if any
            model = self._resume(previous, source, policy, save_replay_buffer, common, kwargs)
            if extra_state is not None:
                extra_state.load(previous.path)
            if model.num_timesteps >= total_timesteps:
                return previous
        else:
            origin = str(start.path) if start is not None else None
            model = _algorithm_class(self.name)(
                policy, source, seed=seed, verbose=0, **common, **kwargs
            )
            if start is not None:  # fine-tuning: the weights (and optimizer) of `init_from`
                weights = trusted.open_verified(start.path / MODEL_FILE, "init_from")
                model.set_parameters(weights, device="cpu")
            if reseed:
                model.set_random_seed(seed)
        if tensorboard_log is None:
            # SB3 would make an empty SB3-<time> folder in the system temp dir at every learn
            # call for a logger that writes nowhere: give it one that makes no folder
            from stable_baselines3.common.logger import Logger

            model.set_logger(Logger(folder=None, output_formats=[]))
        counter = StepCounter(int(previous.result.get("gradient_steps", 0)) if previous else 0)
        model.policy.optimizer.register_step_post_hook(counter)

        config = {
            **budget.model_dump(),
            "policy": getattr(policy, "__name__", policy),
            "tensorboard_dir": tensorboard_log,
            "init_from": origin,
            **kwargs,
        }
        callback = _callback(on_progress, on_episode, on_step)
        checkpoint = previous
        while model.num_timesteps < total_timesteps:
            chunk = total_timesteps - model.num_timesteps
            model.learn(
                min(chunk, checkpoint_every or chunk),
                callback=callback,
                reset_num_timesteps=False,
                tb_log_name=self.name,
            )
            steps = int(model.num_timesteps)
            result = {
                "timesteps": steps,
                "global_step": steps,
                "gradient_steps": counter.steps,
                "seconds": time.perf_counter() - started,
            }
            last = steps >= total_timesteps
            write = self._writer(model, save_replay_buffer, extra_state)
            checkpoint = line.save(write, self.name, version if last else None, config, result)
        assert checkpoint is not None
        return checkpoint

    def _start(self, init_from: Checkpoint | str | Path) -> Checkpoint:
        """The checkpoint a fresh line starts from: this algorithm's, its model file the
        project's own."""
        start = find_checkpoint(init_from)
        if start.algorithm != self.name:
            raise ValueError(
                f"init_from: {start.path} was written by {start.algorithm or 'no algorithm'!r}, "
                f"not {self.name!r} (fine-tune with the algorithm that trained it)"
            )
        trusted.require_file(start.path / MODEL_FILE, "init_from")
        return start

    def _resume(
        self,
        previous: Checkpoint,
        source: Any,
        policy: str | type,
        replay_buffer: bool,
        common: dict[str, Any],
        kwargs: dict[str, Any],
    ) -> Any:
        """The model of `previous` on `source`, with this call's settings (a resubmitted job's
        changes are not ignored), its random generators and replay buffer."""
        saved = trusted.open_verified(previous.path / MODEL_FILE, "checkpoints")
        custom = {} if isinstance(policy, str) else {"policy_class": policy}
        model = _algorithm_class(self.name).load(
            saved, env=source, custom_objects=custom, **common, **kwargs
        )
        states = previous.path / RANDOM_STATE_FILE
        if states.is_file():
            restore_random_states(model, json.loads(states.read_text()))
        buffer = previous.path / BUFFER_FILE
        if replay_buffer and buffer.is_file() and hasattr(model, "load_replay_buffer"):
            model.load_replay_buffer(trusted.open_verified(buffer, "checkpoints"))
        return model

    def _writer(
        self, model: Any, replay_buffer: bool, extra_state: ExtraState | None
    ) -> Callable[[Path], None]:
        def write(directory: Path) -> None:
            model.save(str(directory / MODEL_FILE))
            (directory / RANDOM_STATE_FILE).write_text(json.dumps(random_states(model)))
            if replay_buffer and getattr(model, "replay_buffer", None) is not None:
                model.save_replay_buffer(str(directory / BUFFER_FILE))
            if extra_state is not None:
                extra_state.save(directory)

        return write

    def load(self, checkpoint: Checkpoint | str | Path) -> Any:
        """The SB3 model of a checkpoint; a bare `.zip` the project saved loads too."""
        path = checkpoint.path if isinstance(checkpoint, Checkpoint) else Path(checkpoint)
        if path.is_dir():
            found = find_checkpoint(path)
            self.check_written_by_me(found)
            path = found.path / MODEL_FILE
        elif path.name == MODEL_FILE and path.parent.is_dir():  # a checkpoint's own zip
            self.check_written_by_me(Checkpoint.read(path.parent))
        # an SB3 zip is a pickle: only the project's own, loaded from the bytes checked
        return _algorithm_class(self.name).load(trusted.open_verified(path), device="cpu")


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
