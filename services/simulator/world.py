"""A world: N copies of one registered environment, stepped together as one batch.

Every array a world returns has a leading dimension N (one row per env). Besides the
environment's own observation entries a world always returns

* `reward` (float32), `discount` (float32: 0 when the episode terminated, 1 otherwise),
* `step_type` (int64: 0 FIRST, 1 MID, 2 LAST), as dm_env and dm_env_rpc do.

Actions (`actions.py`): an env's action space is `Discrete` (`action` holds one integer per env)
or a floating-point `Box` (`action` holds one array of the box's shape per env, shape
(N, *box.shape)); skill envs also take `skill`, one text per env.

Text entries come back as numpy `<U` arrays. Privileged entries (e.g. `oracle_plan`) are only
returned when asked for by name in `observations`.

Auto-reset ("next step" semantics, as gymnasium's NEXT_STEP autoreset mode): an env whose
last step was LAST is reset by its next step; that step ignores the env's action (and skill)
and returns FIRST with reward 0 and discount 1. A new world starts with every env in that
state, so its first `step` (or `reset`) starts every episode. Env i is seeded with `seed + i`
on its first reset (and on `reset(seed=s)` with `s + i`); later auto-resets continue each
env's own random stream, so a world is deterministic given its seed.

All actions of a batch are checked (dtype, shape, bounds, finite values, skill text) before
any env is stepped, so bad input never leaves a batch half-stepped. With `num_workers > 0` the
envs are split over worker processes (see `sharding.py`), which gives the same results as one
process.
"""

from __future__ import annotations

import contextlib
import enum
import inspect
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from llmrl.common.registry import gym_id, registry
from llmrl.simulator.actions import ActionSpace, check_action_space, check_actions, env_action
from llmrl.simulator.envs.base import InvalidSkillError, SkillEnv, SkillStatus, step_skill
from llmrl.simulator.errors import WorldError

# Observation entries only returned on request (oracle planners use them); an env may name
# more in a `privileged_observations` class attribute.
PRIVILEGED_OBSERVATIONS: tuple[str, ...] = ("oracle_plan", "feasible_skills")
# World settings that are not keyword arguments of the environment.
WORLD_SETTINGS: tuple[str, ...] = ("env", "num_envs", "seed", "num_workers")
# gymnasium.make's own keyword arguments that a world accepts as settings too.
MAKE_SETTINGS: tuple[str, ...] = ("max_episode_steps",)
_STDOUT_LOCK = threading.Lock()


class StepType(enum.IntEnum):
    FIRST = 0
    MID = 1
    LAST = 2


# The entries a world adds to every env's observations.
STEP_ENTRIES: tuple[str, ...] = ("reward", "discount", "step_type")


def episode_ends(result: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(terminated, truncated) per env of a step's result, from step_type and discount."""
    last = result["step_type"] == StepType.LAST
    terminated = last & (result["discount"] == 0)
    return terminated, last & ~terminated


def env_ids() -> list[str]:
    return registry.names("env")


def check_env_kwargs(env: str, env_kwargs: dict[str, Any]) -> None:
    """Raise WorldError naming any setting that neither the world nor the env accepts."""
    try:
        entry = registry.entry("env", env)
    except KeyError as exc:
        raise WorldError("env", str(exc)) from None
    accepted = set(entry.metadata.get("kwargs", {})) | set(MAKE_SETTINGS)
    try:
        parameters = inspect.signature(entry.obj).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: let gymnasium decide
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return
    accepted |= {
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    for name in env_kwargs:
        if name not in accepted:
            allowed = ", ".join(sorted(accepted | set(WORLD_SETTINGS)))
            raise WorldError(name, f"unknown setting for env {env!r}; settings: {allowed}")


# A world's cost is bounded before any env is built (issue 14): settings named "*size" (rooms,
# grids, views) are cells per side; the cells of all envs together, and episode lengths, are
# capped so that one CreateWorld cannot take hours or exhaust the host's memory.
MAX_SIZE_SETTING = 64
MAX_WORLD_CELLS = 1 << 20  # e.g. 4,096 envs of 16×16 rooms
MAX_EPISODE_STEPS = 1_000_000
MAX_NUMBER_SETTING = 1e9


def check_world_cost(num_envs: int, env_kwargs: dict[str, Any]) -> None:
    """Raise WorldError naming the setting when a world would cost more than the bounds above:
    a size over MAX_SIZE_SETTING, num_envs × the largest size² over MAX_WORLD_CELLS, an episode
    limit over MAX_EPISODE_STEPS, or a number that is not finite or beyond ±MAX_NUMBER_SETTING."""
    largest = 1
    for name, value in env_kwargs.items():
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
            continue
        if not np.isfinite(value) or abs(value) > MAX_NUMBER_SETTING:
            raise WorldError(name, f"expected a finite number within ±{MAX_NUMBER_SETTING:g}, "
                             f"got {value!r}")  # fmt: skip
        if name.endswith("size") and value > MAX_SIZE_SETTING:
            raise WorldError(name, f"at most {MAX_SIZE_SETTING} on this server, got {value}")
        if name.endswith("size"):
            largest = max(largest, int(value))
        if name in ("max_steps", "max_episode_steps") and value > MAX_EPISODE_STEPS:
            raise WorldError(name, f"at most {MAX_EPISODE_STEPS} on this server, got {value}")
    if num_envs * largest * largest > MAX_WORLD_CELLS:
        raise WorldError(
            "num_envs",
            f"{num_envs} envs of size {largest} make {num_envs * largest * largest} cells; at "
            f"most {MAX_WORLD_CELLS} per world on this server (fewer envs or smaller rooms)",
        )


def make_env(env: str, **env_kwargs: Any) -> gym.Env:
    """One registered environment, built through gymnasium (TimeLimit included)."""
    check_env_kwargs(env, env_kwargs)
    return gym.make(gym_id(env), disable_env_checker=True, **env_kwargs)


def world_observation_space(env_space: spaces.Space) -> spaces.Dict:
    """The env's observation entries plus reward, discount and step_type (per env)."""
    if not isinstance(env_space, spaces.Dict):
        raise TypeError(f"a world's env needs a spaces.Dict observation space, got {env_space}")
    entries = dict(env_space.spaces)
    entries["reward"] = spaces.Box(-np.inf, np.inf, (), np.float32)
    entries["discount"] = spaces.Box(0.0, 1.0, (), np.float32)
    entries["step_type"] = spaces.Discrete(3)
    return spaces.Dict(entries)


def check_observation_names(
    names: Iterable[str] | None, space: spaces.Dict, default: Sequence[str]
) -> list[str]:
    if names is None:
        return list(default)
    if isinstance(names, str):
        names = [names]
    selected = list(dict.fromkeys(names))
    for name in selected:
        if name not in space.spaces:
            raise WorldError(
                "observations", f"unknown entry {name!r}; entries: {', '.join(space.spaces)}"
            )
    return selected


class EnvBatch:
    """The envs of one process, stepped in a loop (the unit that a shard holds)."""

    def __init__(
        self,
        env: str,
        num_envs: int,
        seed: int | None,
        env_kwargs: dict[str, Any],
        first_index: int = 0,
    ) -> None:
        self.first_index = first_index  # of env 0 in the whole world, for error messages
        self.envs = [make_env(env, **env_kwargs) for _ in range(num_envs)]
        self.seed = seed
        self.started = [False] * num_envs
        self.needs_reset = np.ones(num_envs, dtype=bool)
        self.last_obs: list[dict[str, Any] | None] = [None] * num_envs
        self.last_step_type = np.full(num_envs, StepType.LAST, dtype=np.int64)
        self.last_discount = np.ones(num_envs, dtype=np.float32)
        first = self.envs[0]
        self.action_space: ActionSpace = check_action_space(first.action_space)
        self.observation_space = world_observation_space(first.observation_space)
        self.has_skills = isinstance(first.unwrapped, SkillEnv)
        self.privileged = PRIVILEGED_OBSERVATIONS + tuple(
            getattr(first.unwrapped, "privileged_observations", ())
        )
        self._kinds = {name: _entry_kind(space) for name, space in self.observation_space.items()}
        # Privileged entries the env computes on request (SkillEnv.compute_privileged).
        self.on_request = (
            frozenset(self.privileged)
            if hasattr(first.unwrapped, "privileged_observation")
            else frozenset()
        )
        for env in self.envs if self.on_request else ():
            env.unwrapped.compute_privileged = False

    def _reset_env(self, i: int, seed: int | None) -> dict[str, Any]:
        if seed is None and not self.started[i] and self.seed is not None:
            seed = self.seed + i
        self.started[i] = True
        # BabyAI level generation prints to stdout; the lock keeps concurrent resets (server
        # threads) from restoring each other's redirected stdout.
        with _STDOUT_LOCK, contextlib.redirect_stdout(None):
            obs, _ = self.envs[i].reset(seed=seed)
        return obs

    def check_skills(self, skills: np.ndarray | None, stepping: np.ndarray) -> None:
        if skills is None:
            return
        for i in np.flatnonzero(stepping & (skills != "")):
            try:
                self.envs[i].unwrapped.check_skill(str(skills[i]))
            except InvalidSkillError as exc:
                raise WorldError(f"skill[{self.first_index + i}]", str(exc)) from None

    def reset(self, seed: int | None, names: list[str]) -> dict[str, np.ndarray]:
        n = len(self.envs)
        self.last_obs = [self._reset_env(i, None if seed is None else seed + i) for i in range(n)]
        self.needs_reset[:] = False
        self.last_step_type[:] = StepType.FIRST
        self.last_discount[:] = 1.0
        return self._batch(names, np.zeros(n, np.float32))

    def step(
        self,
        actions: np.ndarray | None,
        skills: np.ndarray | None,
        active: np.ndarray | None,
        names: list[str],
    ) -> dict[str, np.ndarray]:
        n = len(self.envs)
        rewards = np.zeros(n, dtype=np.float32)
        step_types = self.last_step_type
        discounts = self.last_discount
        for i in range(n):
            if active is not None and not active[i]:
                continue  # repeats its previous observation, reward 0
            if self.needs_reset[i]:
                self.last_obs[i] = self._reset_env(i, None)
                self.needs_reset[i] = False
                step_types[i], discounts[i] = StepType.FIRST, 1.0
                continue
            env = self.envs[i]
            if skills is not None and skills[i]:
                obs, reward, terminated, truncated, _ = step_skill(env, str(skills[i]))
            else:
                obs, reward, terminated, truncated, _ = env.step(env_action(actions[i]))  # type: ignore[index]
                if self.has_skills:
                    obs = dict(obs)
                    obs["skill_status"] = int(SkillStatus.NONE)
            self.last_obs[i] = obs
            rewards[i] = reward
            if terminated or truncated:
                self.needs_reset[i] = True
                step_types[i] = StepType.LAST
                discounts[i] = 0.0 if terminated else 1.0
            else:
                step_types[i], discounts[i] = StepType.MID, 1.0
        return self._batch(names, rewards)

    def _batch(self, names: list[str], rewards: np.ndarray) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        observations = self.last_obs
        for name in names:
            if name == "reward":
                out[name] = rewards
            elif name == "discount":
                out[name] = self.last_discount.copy()
            elif name == "step_type":
                out[name] = self.last_step_type.copy()
            else:
                kind, dtype = self._kinds[name]
                if name in self.on_request:
                    values = [env.unwrapped.privileged_observation(name) for env in self.envs]
                else:
                    values = [obs[name] for obs in observations]  # type: ignore[index]
                if kind == "text":
                    out[name] = np.array(values, dtype=str)
                elif kind == "scalar":
                    out[name] = np.fromiter(values, dtype=dtype, count=len(values))
                else:
                    out[name] = np.stack(values).astype(dtype, copy=False)
        return out

    def close(self) -> None:
        for env in self.envs:
            env.close()
        # a closed batch holds nothing: whoever still refers to its world keeps no envs alive
        self.envs, self.last_obs = [], []


def _entry_kind(space: spaces.Space) -> tuple[str, np.dtype | None]:
    if isinstance(space, spaces.Text):
        return "text", None
    if isinstance(space, spaces.Discrete):
        return "scalar", np.dtype(np.int64)
    if isinstance(space, spaces.Box | spaces.MultiBinary | spaces.MultiDiscrete):
        return ("scalar" if space.shape == () else "array"), np.dtype(space.dtype)
    raise TypeError(f"unsupported observation space {space!r}")


class World:
    """N copies of one registered environment, stepped as one batch (see module docstring)."""

    def __init__(
        self,
        env: str,
        num_envs: int = 1,
        seed: int | None = None,
        num_workers: int = 0,
        **env_kwargs: Any,
    ) -> None:
        _check_int("num_envs", num_envs, minimum=1)
        _check_int("num_workers", num_workers, minimum=0)
        if seed is not None:
            _check_int("seed", seed, minimum=0)
        check_env_kwargs(env, env_kwargs)
        check_world_cost(num_envs, env_kwargs)
        self.env = env
        self.num_envs = num_envs
        self.seed = seed
        self.num_workers = min(num_workers, num_envs)
        if self.num_workers > 0:
            from llmrl.simulator.sharding import ShardedBatch

            self._batch: Any = ShardedBatch(env, num_envs, seed, self.num_workers, env_kwargs)
        else:
            self._batch = EnvBatch(env, num_envs, seed, env_kwargs)
        self.observation_space: spaces.Dict = self._batch.observation_space
        self.action_space: ActionSpace = self._batch.action_space
        self.has_skills: bool = self._batch.has_skills
        self.privileged_observations: tuple[str, ...] = tuple(
            dict.fromkeys(
                name for name in self._batch.privileged if name in self.observation_space.spaces
            )
        )
        self.default_observations: list[str] = [
            name
            for name in self.observation_space.spaces
            if name not in self.privileged_observations
        ]
        self._needs_reset = np.ones(num_envs, dtype=bool)
        self._closed = False

    def reset(
        self, seed: int | None = None, observations: Iterable[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Start a new episode in every env (env i seeded with seed + i when seed is given)."""
        self._check_open()
        if seed is not None:
            _check_int("seed", seed, minimum=0)
        names = check_observation_names(
            observations, self.observation_space, self.default_observations
        )
        result = self._batch.reset(seed, names)
        self._needs_reset[:] = False
        return result

    def step(
        self,
        action: Any = None,
        skill: Any = None,
        observations: Iterable[str] | None = None,
        *,
        active: Any = None,
    ) -> dict[str, np.ndarray]:
        """Advance every env one step (envs after a LAST step are reset instead).

        `action` has one row per env: an integer (Discrete) or an array of the box's shape
        (Box; any float dtype, cast to the box's). `skill[i] == ""` means env i takes
        `action[i]`. `active` (bool per env, default all) is for adapters that must reset
        finished envs without stepping the others: an inactive env is not stepped and
        repeats its previous entries with reward 0.
        """
        self._check_open()
        names = check_observation_names(
            observations, self.observation_space, self.default_observations
        )
        stepping = ~self._needs_reset
        if active is not None:
            active = np.asarray(active)
            if active.dtype != np.bool_ or active.shape != (self.num_envs,):
                raise WorldError(
                    "active",
                    f"expected booleans of shape ({self.num_envs},), got "
                    f"{active.dtype} {active.shape}",
                )
            stepping = stepping & active
        actions, skills = check_actions(
            action, skill, self.num_envs, self.action_space, self.has_skills, stepping
        )
        self._batch.check_skills(skills, stepping)
        wanted = names if "step_type" in names else [*names, "step_type"]
        result = self._batch.step(actions, skills, active, wanted)
        step_types = result["step_type"] if wanted is names else result.pop("step_type")
        moved = slice(None) if active is None else active
        self._needs_reset[moved] = step_types[moved] == StepType.LAST
        return result

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._batch.close()

    def _check_open(self) -> None:
        if self._closed:
            raise WorldError("world", "this world is closed")

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"World(env={self.env!r}, num_envs={self.num_envs}, seed={self.seed}, "
            f"num_workers={self.num_workers})"
        )


def _check_int(field: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise WorldError(field, f"expected an integer >= {minimum}, got {value!r}")
