"""Recording a world's episodes as an `OfflineDataset`, and KALM's datasets on disk.

`record_episodes(world, policy, n)` plays a batched world (in-process `World`, sharded, or a
`RemoteWorld` over gRPC: the same calls) with `policy(observations) -> actions` until `n`
episodes have finished, and keeps each finished episode whole: its states, actions, rewards,
how it ended (terminal when the env ended it, e.g. on success; timeout when the time limit
cut it), its instruction, its goal and its final state. Episodes still running when the n-th
ends are dropped, so every recorded episode is complete.

The goal of an episode is the observation's `goal` entry when the env has one (CLEVR-Robot's 6
numbers) and else `goal_of(state)` (Meta-World: the goal position, the last 3 of the 39).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmrl.common.offline_dataset import OfflineDataset

# A policy maps a world's batched observations (dict of arrays, one row per env) to actions.
Policy = Callable[[dict[str, np.ndarray]], np.ndarray]
FIRST, LAST = 0, 2


def metaworld_goal(state: np.ndarray) -> np.ndarray:
    """Meta-World v3's goal position: the last 3 numbers of its 39-number observation."""
    return np.asarray(state[-3:], dtype=np.float32)


@dataclass
class _Running:
    """The transitions of one env's current episode."""

    instruction: str
    goal: np.ndarray
    states: list[np.ndarray] = field(default_factory=list)
    actions: list[Any] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)


def record_episodes(
    world: Any,
    policy: Policy,
    num_episodes: int,
    *,
    env: str,
    source: str = "scripted",
    goal_of: Callable[[np.ndarray], np.ndarray] | None = None,
    progress: Callable[[int], None] | None = None,
    seed: int | None = None,
) -> OfflineDataset:
    """Play `world` with `policy` until `num_episodes` episodes finished; see the module doc.

    `progress(k)` is called with the number of episodes finished so far after each that does.
    """
    if num_episodes < 1:
        raise ValueError(f"num_episodes: expected at least 1, got {num_episodes}")
    observations = world.reset(seed=seed)
    if "goal" not in observations and goal_of is None:
        raise ValueError("goal_of: the env has no `goal` observation; say how to read a goal")
    running: list[_Running | None] = [None] * world.num_envs
    finished: list[tuple[_Running, bool, np.ndarray]] = []  # (episode, terminal, final state)

    def start(i: int, obs: dict[str, np.ndarray]) -> None:
        state = obs["state"][i]
        goal = obs["goal"][i] if "goal" in obs else goal_of(state)
        running[i] = _Running(str(obs["instruction"][i]), np.asarray(goal, np.float32))

    for i in range(world.num_envs):
        start(i, observations)
    while len(finished) < num_episodes:
        actions = np.asarray(policy(observations))
        result = world.step(actions)
        for i in range(world.num_envs):
            episode = running[i]
            if result["step_type"][i] == FIRST:  # an auto-reset: the action was not taken
                start(i, result)
                continue
            assert episode is not None
            episode.states.append(observations["state"][i])
            episode.actions.append(actions[i])
            episode.rewards.append(float(result["reward"][i]))
            if result["step_type"][i] == LAST:
                terminal = bool(result["discount"][i] == 0)
                finished.append((episode, terminal, result["state"][i]))
                running[i] = None
                if progress is not None and len(finished) <= num_episodes:
                    progress(len(finished))
        observations = result
    return _to_dataset(finished[:num_episodes], env=env, source=source)


def _to_dataset(
    episodes: list[tuple[_Running, bool, np.ndarray]], env: str, source: str
) -> OfflineDataset:
    lengths = [len(e.rewards) for e, _, _ in episodes]
    ends = np.cumsum(lengths) - 1
    terminal_ends = np.array([t for _, t, _ in episodes], bool)
    terminals = np.zeros(sum(lengths), bool)
    timeouts = np.zeros(sum(lengths), bool)
    terminals[ends[terminal_ends]] = True
    timeouts[ends[~terminal_ends]] = True
    return OfflineDataset.from_arrays(
        env=env,
        source=source,
        observations=np.concatenate([np.stack(e.states) for e, _, _ in episodes]),
        actions=np.concatenate([np.stack(e.actions) for e, _, _ in episodes]),
        rewards=np.concatenate([e.rewards for e, _, _ in episodes]),
        terminals=terminals,
        timeouts=timeouts,
        episode_ids=np.repeat(np.arange(len(episodes)), lengths),
        instructions=[e.instruction for e, _, _ in episodes],
        goals=np.stack([e.goal for e, _, _ in episodes]),
        final_observations=np.stack([final for _, _, final in episodes]),
    )
