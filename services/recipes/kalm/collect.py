"""Scripted data collection for KALM: a noisy pusher for CLEVR-Robot, Meta-World's experts.

* `ScriptedPusher(noise)`: for each env, the push that brings the state nearest its goal under
  our physics (`clevr_robot.push` and `goal_distance`, one look-ahead step over the pushes of
  the balls the goal names); with probability `noise` a uniformly random push (any ball)
  instead. It reaches most goals
  in a handful of pushes, and the noise gives offline RL the off-goal actions it needs.
* `MetaWorldExpert(task, noise)`: `metaworld.policies`' scripted expert of the task, its
  action plus Gaussian noise of standard deviation `noise`, clipped to [-1, 1].

`collect_clevr` and `collect_metaworld` play worlds of the `ClevrRobot` / `MetaWorld` envs (in
this process, or any world given, e.g. a `RemoteWorld` over gRPC) and return the episodes as
"scripted" `OfflineDataset`s (`data.record_episodes`). Meta-World data spreads its episodes
evenly over the given noise levels.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from llmrl.common.offline_dataset import OfflineDataset
from llmrl.simulator.envs import clevr_robot
from llmrl.simulator.world import World

from .data import metaworld_goal, record_episodes


def _check_noise(noise: float, high: float = 1.0) -> float:
    if isinstance(noise, bool) or not isinstance(noise, int | float) or not 0 <= noise <= high:
        raise ValueError(f"noise: expected a number in [0, {high}], got {noise!r}")
    return float(noise)


class ScriptedPusher:
    """CLEVR-Robot's noisy scripted pusher (see the module doc)."""

    def __init__(self, noise: float = 0.2, seed: int | None = None) -> None:
        self.noise = _check_noise(noise)
        self.rng = np.random.default_rng(seed)

    def best_push(self, state: np.ndarray, goal: np.ndarray) -> int:
        """The push of a named ball after which the state is nearest the goal (ties: the
        lowest id)."""
        balls = clevr_robot.named_balls(goal)
        candidates = [b * clevr_robot.NUM_DIRECTIONS + d for b in balls for d in range(8)]
        distances = [
            clevr_robot.goal_distance(clevr_robot.push(state, a), goal) for a in candidates
        ]
        return candidates[int(np.argmin(distances))]

    def __call__(self, observations: dict[str, np.ndarray]) -> np.ndarray:
        actions = []
        for state, goal in zip(observations["state"], observations["goal"], strict=True):
            if self.rng.random() < self.noise:
                actions.append(int(self.rng.integers(clevr_robot.NUM_ACTIONS)))
            else:
                actions.append(self.best_push(state, goal))
        return np.array(actions, dtype=np.int64)


class MetaWorldExpert:
    """Meta-World's scripted expert of one task with Gaussian action noise."""

    def __init__(self, task: str, noise: float = 0.0, seed: int | None = None) -> None:
        from llmrl.simulator.envs.metaworld_tasks import expert_policy

        self.expert = expert_policy(task)
        self.noise = _check_noise(noise, high=2.0)
        self.rng = np.random.default_rng(seed)

    def __call__(self, observations: dict[str, np.ndarray]) -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the experts warn whenever a gain is clipped
            actions = np.stack(
                [self.expert.get_action(s.astype(np.float64)) for s in observations["state"]]
            )
        actions = (
            actions + self.rng.normal(0.0, self.noise, actions.shape) if self.noise else actions
        )
        return np.clip(actions, -1.0, 1.0).astype(np.float32)


def collect_clevr(
    num_episodes: int,
    *,
    level: str = "training",
    noise: float = 0.2,
    seed: int = 0,
    num_envs: int = 8,
    world: Any = None,
    progress: Callable[[int], None] | None = None,
    goals_per_start: int = 1,
) -> OfflineDataset:
    """`num_episodes` scripted-pusher episodes of `ClevrRobot` at `level` (random goals;
    `goals_per_start` episodes in a row share a start state, the env's setting)."""
    own = world is None
    if not own and goals_per_start != 1:
        raise ValueError(
            "goals_per_start: a given world keeps its own env settings; create it with "
            "goals_per_start instead"
        )
    world = world or World(
        "ClevrRobot", num_envs=num_envs, seed=seed, level=level, goals_per_start=goals_per_start
    )
    try:
        return record_episodes(
            world,
            ScriptedPusher(noise, seed=seed),
            num_episodes,
            env="ClevrRobot",
            progress=progress,
        )
    finally:
        if own:
            world.close()


def collect_metaworld(
    tasks: Sequence[str],
    episodes_per_task: int,
    *,
    noise_levels: Sequence[float] = (0.0, 0.1, 0.3),
    seed: int = 0,
    num_envs: int = 2,
    progress: Callable[[int], None] | None = None,
) -> OfflineDataset:
    """Expert episodes of each Meta-World task, split evenly over `noise_levels` (the first
    levels get the remainder), as one "scripted" dataset with env "MetaWorld"."""
    if not noise_levels:
        raise ValueError("noise_levels: expected at least one noise level")
    parts, done = [], 0
    for t, task in enumerate(tasks):
        counts = np.full(len(noise_levels), episodes_per_task // len(noise_levels))
        counts[: episodes_per_task % len(noise_levels)] += 1
        for n, (noise, count) in enumerate(zip(noise_levels, counts, strict=True)):
            if not count:
                continue
            part_seed = seed + 1000 * t + 100 * n
            with World("MetaWorld", num_envs=num_envs, seed=part_seed, task=task) as world:
                parts.append(
                    record_episodes(
                        world,
                        MetaWorldExpert(task, noise, seed=part_seed),
                        int(count),
                        env="MetaWorld",
                        goal_of=metaworld_goal,
                    )
                )
            done += int(count)
            if progress is not None:
                progress(done)
    return OfflineDataset.concatenate(*parts)
