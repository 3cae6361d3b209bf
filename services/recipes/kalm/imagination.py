"""Imagined data for one goal level: what the grounded LLM writes for the level's instructions
from real initial states, filtered and labelled as an `OfflineDataset`.

For each of `count` rollouts: a goal of the level with one of its instructions (cycling through
them, seeded) and a real initial state that does not already meet the goal. The grounded model
imagines the rollout (`llmrl.recipes.kalm.imagine`): greedily, as KALM does, or with
`temperature` > 0 drawing each discrete action from the action head's softmax (seeded), so
that many rollouts per instruction explore pushes the argmax would not make. Two filters
(`imagined_filter`):

* `valid` (KALM's): rollouts with an invalid state (the env's validity check) are dropped;
* `goal` (our option, not the paper's): also the valid rollouts none of whose states meets
  their goal under the level's success function (one that reaches the goal and leaves it is
  kept: the dataset cuts it where it first meets the goal). The paper labels imagined rollouts
  with the environment's reward function, which knows the goal as well as the success function
  does, so this uses no knowledge the labelling does not already use;
* `replay` (a diagnostic, not imagination's to use): also the goal-meeting rollouts whose
  actions, replayed in the env's own dynamics from the same initial state, do not reach the
  goal. It needs the simulator (CLEVR-Robot's `push`), so it is no way to train a policy where
  one is missing; it measures what the imagined data would give if the grounded model's
  dynamics were right where it claims success (an upper bound for better grounding).

The shares kept under both filters are reported whichever is used, with the goal-match rate
(the level's success function on the imagined final state) over all rollouts and over the
valid ones. Where the env can step a state it is given (`ImaginedEnv.step`; CLEVR-Robot's
`push`, not Meta-World, whose observations do not hold the simulator's state), the imagined
dynamics are checked against the env's own: the median one-step error (L2 between each imagined
next state and the env's next state from the same imagined state and action) and the share of
kept rollouts whose actions, replayed in the env from the same initial state, reach the goal
(a kept rollout that meets its goal only in imagination teaches a wrong action). Kept
rollouts are labelled with the env's reward, cut at the first step that meets the goal
(terminal there), and stored with `source="imagined"`.

The env's side is an `ImaginedEnv`:

* `ClevrImagination`: KALM's CLEVR-Robot; goals are the 6-number goals of the level, initial
  states the real episodes' first states, validity `clevr_robot.valid_state` (on the table, no
  overlap), reward `clevr_robot.reward`.
* `MetaWorldImagination`: the level's tasks (unseen-easy, unseen-hard), each with its 20
  instructions. The real data hold only the training tasks' scenes, so initial states are real
  resets of the level's task (Meta-World itself, seeded: a placement of that task's objects),
  and the goal is that reset's goal position. Success and validity are
  `metaworld_goals.success` / `valid_state` (Meta-World's success test on observations; finite,
  within its hand space and the workspace). Actions are clipped to the Box [-1, 1]. Reward: 10
  on reaching the goal, else 0 (Meta-World's shaped reward reads the simulator's contacts and
  initial positions, which an imagined observation lacks; its maximum is 10 at success).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from llmrl.recipes.kalm.imagine import FILTERS as LEARNER_FILTERS
from llmrl.recipes.kalm.imagine import (
    Rollout,
    filter_rollouts,
    goal_match_rate,
    imagine,
    reaches_goal,
)

FILTERS = (*LEARNER_FILTERS, "replay")


class ImaginedEnv(Protocol):
    """What imagination needs of an env, for one level."""

    discrete: bool
    action_bounds: tuple[Any, Any] | None

    def goals(self, level: str) -> list[tuple[Any, str]]:
        """(goal, instruction) pairs of the level."""

    def initial_state(self, level: str, goal: Any, rng: np.random.Generator) -> tuple[Any, Any]:
        """(a real initial state that does not meet `goal`, the goal as the episode has it)."""

    def success(self, level: str, state: np.ndarray, goal: Any) -> bool: ...

    def valid_state(self, state: np.ndarray) -> bool: ...

    def reward(self, level: str, state: np.ndarray, after: np.ndarray, goal: Any) -> float: ...

    def goal_numbers(self, goal: Any) -> np.ndarray:
        """The goal as the dataset stores it (`OfflineDataset.goals`)."""

    # optional: `step(state, action) -> next state`, the env's own dynamics from any state


class ClevrImagination:
    """CLEVR-Robot (see the module doc); initial states from `real`'s episodes."""

    discrete = True
    action_bounds = None

    def __init__(self, real: Any) -> None:
        from llmrl.simulator.envs import clevr_robot

        self.env = clevr_robot
        self.starts = np.stack([episode.observations[0] for episode in real.episodes()])

    def goals(self, level: str) -> list[tuple[Any, str]]:
        return [(np.asarray(g, np.float32), str(t)) for g, t in self.env.instructions(level)]

    def initial_state(self, level: str, goal: Any, rng: np.random.Generator) -> tuple[Any, Any]:
        for _ in range(100):  # a start that does not meet the goal already
            start = self.starts[rng.integers(len(self.starts))]
            if not self.success(level, start, goal):
                break
        return start, goal

    def success(self, level: str, state: np.ndarray, goal: Any) -> bool:
        return bool(self.env.LEVEL_SUCCESS[level](state, goal))

    def valid_state(self, state: np.ndarray) -> bool:
        return bool(self.env.valid_state(state))

    def reward(self, level: str, state: np.ndarray, after: np.ndarray, goal: Any) -> float:
        return float(self.env.reward(state, after, goal))

    def goal_numbers(self, goal: Any) -> np.ndarray:
        return np.asarray(goal, np.float32)

    def step(self, state: np.ndarray, action: Any) -> np.ndarray:
        return self.env.push(state, int(action))


class MetaWorldImagination:
    """Meta-World v3 (see the module doc); a goal is (task, goal position)."""

    discrete = False
    action_bounds = (-1.0, 1.0)  # the MetaWorld env's Box

    def __init__(self) -> None:
        from llmrl.recipes.kalm import metaworld_goals

        self.checks = metaworld_goals
        self._envs: dict[str, Any] = {}

    def goals(self, level: str) -> list[tuple[Any, str]]:
        from llmrl.simulator.envs.metaworld_tasks import TASK_LEVELS, instructions

        return [(task, text) for task in TASK_LEVELS[level] for text in instructions(task)]

    def initial_state(self, level: str, goal: Any, rng: np.random.Generator) -> tuple[Any, Any]:
        from llmrl.simulator.envs.metaworld_tasks import make_task_env

        task = goal
        if task not in self._envs:
            self._envs[task] = make_task_env(task)
        env = self._envs[task]
        for _ in range(20):  # a placement whose start does not meet the goal already
            env.seed(int(rng.integers(2**31)))
            observation, _ = env.reset()
            state = observation.astype(np.float32)
            position = state[self.checks.GOAL].copy()
            if not self.checks.success(task, state, position):
                break
        return state, (task, position)

    def success(self, level: str, state: np.ndarray, goal: Any) -> bool:
        task, position = goal
        return self.checks.success(task, state, position)

    def valid_state(self, state: np.ndarray) -> bool:
        return self.checks.valid_state(state)

    def reward(self, level: str, state: np.ndarray, after: np.ndarray, goal: Any) -> float:
        return 10.0 if self.success(level, after, goal) else 0.0

    def goal_numbers(self, goal: Any) -> np.ndarray:
        return np.asarray(goal[1], np.float32)  # the goal position, as the real data store it

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs.clear()


def imagination_env(env: str, real: Any) -> ImaginedEnv:
    if env == "ClevrRobot":
        return ClevrImagination(real)
    if env == "MetaWorld":
        return MetaWorldImagination()
    raise ValueError(f"env: no imagination for {env!r}; envs: ClevrRobot, MetaWorld")


def level_rng(seed: int, level: str) -> np.random.Generator:
    """The level's own seeded stream of instructions and initial states: keyed by a checksum of
    its name (levels of equal length, unseen-easy and unseen-hard, must not share a stream)."""
    return np.random.default_rng([seed, zlib.crc32(level.encode())])


def level_pairs(
    env: ImaginedEnv, level: str, count: int, rng: np.random.Generator
) -> tuple[list[Any], list[str], list[Any]]:
    """(goals, instructions, initial states) of `count` rollouts: the level's goals in a seeded
    order, cycled, each with a real initial state that does not already meet it."""
    pairs = env.goals(level)
    order = rng.permutation(len(pairs))
    goals, texts, initial = [], [], []
    for i in range(count):
        goal, text = pairs[order[i % len(pairs)]]
        start, goal = env.initial_state(level, goal, rng)
        goals.append(goal)
        texts.append(text)
        initial.append(start)
    return goals, texts, initial


def imagine_level(
    grounded: Any,
    real: Any,
    env: ImaginedEnv,
    level: str,
    *,
    count: int,
    max_steps: int,
    seed: int = 0,
    imagined_filter: str = "valid",
    on_progress: Callable[[int], None] | None = None,
    temperature: float = 0.0,
) -> tuple[Any, dict[str, Any]]:
    """(the kept rollouts as an OfflineDataset, or None when none was kept; figures)."""
    if imagined_filter not in FILTERS:
        raise ValueError(
            f"imagined_filter: expected one of {', '.join(FILTERS)}, got {imagined_filter!r}"
        )
    step = getattr(env, "step", None)
    if imagined_filter == "replay" and step is None:
        raise ValueError(
            "imagined_filter: replay needs an env whose dynamics can step an imagined state "
            f"(ClevrRobot); {type(env).__name__} has none: use valid or goal"
        )
    rng = level_rng(seed, level)
    goals, texts, initial = level_pairs(env, level, count, rng)
    rollouts = imagine(
        grounded,
        np.stack(initial),
        texts,
        max_steps=max_steps,
        action_bounds=env.action_bounds,
        on_progress=on_progress,
        temperature=temperature,
        seed=int(rng.integers(2**31)),  # the level's stream: the draws differ per level
    )

    def success(state: np.ndarray, goal: Any) -> bool:
        state = np.asarray(state)
        return bool(np.isfinite(state).all() and env.success(level, state, goal))

    valid, reaching, kept = select(rollouts, goals, env.valid_state, success, imagined_filter, step)
    total = len(rollouts) or 1
    figures = {
        "rollouts": len(rollouts),
        "filter": imagined_filter,
        "temperature": temperature,
        "kept": len(kept),
        "kept_share": len(kept) / total,
        "kept_share_valid": len(valid) / total,
        "kept_share_goal": len(reaching) / total,
        "goal_match": goal_match_rate(rollouts, goals, success),
        "goal_match_kept": goal_match_rate(
            [rollouts[i] for i in valid], [goals[i] for i in valid], success
        ),
        "mean_length": float(np.mean([len(r.actions) for r in rollouts])) if rollouts else 0.0,
    }
    if step is not None:  # replay: the share of the goal-meeting rollouts it kept
        checked = reaching if imagined_filter == "replay" else kept
        figures.update(dynamics_fidelity(rollouts, goals, checked, step, success))
    if not kept:
        return None, figures
    dataset = to_dataset(real.env, [rollouts[i] for i in kept], [goals[i] for i in kept],
                         [texts[i] for i in kept], env, level, success)  # fmt: skip
    figures["imagined_transitions"] = len(dataset)
    figures["imagined_success_share"] = float(dataset.terminals.sum() / len(kept))
    return dataset, figures


def select(
    rollouts: list[Rollout],
    goals: list[Any],
    valid_state: Callable[[np.ndarray], bool],
    success: Callable[[np.ndarray, Any], bool],
    imagined_filter: str,
    step: Callable[[np.ndarray, Any], np.ndarray] | None = None,
) -> tuple[list[int], list[int], list[int]]:
    """Indices of the valid rollouts, of those that meet their goal, and of those the filter
    keeps (module docstring; `replay` needs the env's `step`)."""
    valid, _ = filter_rollouts(rollouts, valid_state)
    reaching = [i for i in valid if reaches_goal(rollouts[i], goals[i], success)]
    if imagined_filter == "valid":
        return valid, reaching, valid
    if imagined_filter == "goal":
        return valid, reaching, reaching
    if imagined_filter != "replay" or step is None:
        raise ValueError(f"imagined_filter: {imagined_filter!r} needs the env's dynamics")
    kept = [i for i in reaching if replay_reaches_goal(rollouts[i], goals[i], step, success)]
    return valid, reaching, kept


def dynamics_fidelity(
    rollouts: list[Rollout],
    goals: list[Any],
    kept: list[int],
    step: Callable[[np.ndarray, Any], np.ndarray],
    success: Callable[[np.ndarray, Any], bool],
) -> dict[str, float | None]:
    """The imagined dynamics against the env's (see the module doc): `one_step_error` (median
    over every finite imagined step) and `replay_goal_match_kept` (of the `kept` rollouts)."""
    errors = []
    for rollout in rollouts:
        for t, action in enumerate(rollout.actions):
            state, after = np.asarray(rollout.states[t]), np.asarray(rollout.states[t + 1])
            if np.isfinite(state).all() and np.isfinite(after).all():
                errors.append(float(np.linalg.norm(step(state, action) - after)))
    reached = sum(replay_reaches_goal(rollouts[i], goals[i], step, success) for i in kept)
    return {
        "one_step_error": float(np.median(errors)) if errors else None,
        "replay_goal_match_kept": reached / len(kept) if kept else None,
    }


def replay_reaches_goal(
    rollout: Rollout,
    goal: Any,
    step: Callable[[np.ndarray, Any], np.ndarray],
    success: Callable[[np.ndarray, Any], bool],
) -> bool:
    """Whether the rollout's actions, played by the env from its first state, meet `goal`."""
    state = np.asarray(rollout.states[0])
    for action in rollout.actions:
        state = step(state, action)
        if success(state, goal):
            return True
    return False


def to_dataset(
    env_name: str,
    rollouts: list[Rollout],
    goals: list[Any],
    texts: list[str],
    env: ImaginedEnv,
    level: str,
    success: Callable[[np.ndarray, Any], bool],
) -> Any:
    """The rollouts as an "imagined" OfflineDataset: rewards from the env, each cut at the first
    step that meets its goal (terminal there; a timeout otherwise)."""
    from llmrl.common.offline_dataset import OfflineDataset

    columns: dict[str, list[Any]] = {
        k: []
        for k in ("observations", "actions", "rewards", "terminals", "timeouts", "episode_ids")
    }
    finals, episode_goals = [], []
    for episode, (rollout, goal) in enumerate(zip(rollouts, goals, strict=True)):
        states, actions = rollout.states, rollout.actions
        steps = len(actions)
        for t in range(len(actions)):
            if success(states[t + 1], goal):
                steps = t + 1
                break
        for t in range(steps):
            reached = success(states[t + 1], goal)
            columns["observations"].append(states[t])
            columns["actions"].append(
                int(actions[t]) if env.discrete else np.asarray(actions[t], np.float32)
            )
            columns["rewards"].append(env.reward(level, states[t], states[t + 1], goal))
            columns["terminals"].append(reached)
            columns["timeouts"].append(t == steps - 1 and not reached)
            columns["episode_ids"].append(episode)
        finals.append(states[steps])
        episode_goals.append(env.goal_numbers(goal))
    return OfflineDataset.from_arrays(
        env=env_name,
        source="imagined",
        final_observations=np.stack(finals),
        instructions=np.asarray(texts),
        goals=np.stack(episode_goals),
        **{k: np.asarray(v) for k, v in columns.items()},
    )
