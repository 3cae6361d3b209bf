"""Imagined data for one goal level of CLEVR-Robot: what the grounded LLM writes for the level's
instructions from real initial states, filtered and labelled as an `OfflineDataset`.

For each of `count` rollouts: an (instruction, goal) pair of the level (cycling through them,
seeded) and a real episode's initial state (one that does not already satisfy the goal). The
grounded model imagines the rollout (`llmrl.learner.llm.imagine`); rollouts with an invalid
state (the env's `valid_state`: off the table, balls overlapping, non-finite) are dropped and
the share kept is reported, with the goal-match rate (the level's success function on the
imagined final state) over all rollouts and over the kept ones. Kept rollouts are labelled with
the env's own reward function, cut at the first step that reaches the goal (terminal there),
and stored with `source="imagined"`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from llmrl.learner.llm.imagine import filter_rollouts, goal_match_rate, imagine


def imagine_level(
    grounded: Any,
    real: Any,
    env: Any,
    level: str,
    *,
    count: int,
    max_steps: int,
    seed: int = 0,
    on_progress: Callable[[int], None] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """(the kept rollouts as an OfflineDataset, or None when none was kept; figures)."""
    from llmrl.common.offline_dataset import OfflineDataset

    rng = np.random.default_rng([seed, len(level)])
    success = env.LEVEL_SUCCESS[level]
    pairs = env.instructions(level)
    order = rng.permutation(len(pairs))
    starts = np.stack([episode.observations[0] for episode in real.episodes()])
    goals, texts, initial = [], [], []
    for i in range(count):
        goal, text = pairs[order[i % len(pairs)]]
        for _ in range(100):  # a start that does not satisfy the goal already
            start = starts[rng.integers(len(starts))]
            if not success(start, goal):
                break
        goals.append(np.asarray(goal, np.float32))
        texts.append(str(text))
        initial.append(start)
    rollouts = imagine(
        grounded, np.stack(initial), texts, max_steps=max_steps, on_progress=on_progress
    )
    kept, share = filter_rollouts(rollouts, env.valid_state)
    figures = {
        "rollouts": len(rollouts),
        "kept": len(kept),
        "kept_share": share,
        "goal_match": goal_match_rate(rollouts, goals, _safe(success)),
        "goal_match_kept": goal_match_rate(
            [rollouts[i] for i in kept], [goals[i] for i in kept], success
        ),
        "mean_length": float(np.mean([len(r.actions) for r in rollouts])) if rollouts else 0.0,
    }
    if not kept:
        return None, figures
    columns: dict[str, list[Any]] = {
        k: []
        for k in ("observations", "actions", "rewards", "terminals", "timeouts", "episode_ids")
    }
    finals, instructions, episode_goals = [], [], []
    for episode, i in enumerate(kept):
        states, actions, goal = rollouts[i].states, rollouts[i].actions, goals[i]
        steps = len(actions)
        for t in range(len(actions)):
            if success(states[t + 1], goal):
                steps = t + 1
                break
        for t in range(steps):
            columns["observations"].append(states[t])
            columns["actions"].append(int(actions[t]))
            columns["rewards"].append(env.reward(states[t], states[t + 1], goal))
            reached = bool(success(states[t + 1], goal))
            columns["terminals"].append(reached)
            columns["timeouts"].append(t == steps - 1 and not reached)
            columns["episode_ids"].append(episode)
        finals.append(states[steps])
        instructions.append(texts[i])
        episode_goals.append(goal)
    dataset = OfflineDataset.from_arrays(
        env=real.env,
        source="imagined",
        final_observations=np.stack(finals),
        instructions=np.asarray(instructions),
        goals=np.stack(episode_goals),
        **{k: np.asarray(v) for k, v in columns.items()},
    )
    figures["imagined_transitions"] = len(dataset)
    figures["imagined_success_share"] = float(np.mean(dataset.terminals.sum() / len(kept)))
    return dataset, figures


def _safe(success: Callable[[np.ndarray, Any], bool]) -> Callable[[np.ndarray, Any], bool]:
    """The success function, False on a state it cannot read (NaN, wrong size)."""

    def check(state: np.ndarray, goal: Any) -> bool:
        state = np.asarray(state)
        return bool(np.isfinite(state).all() and success(state, goal))

    return check
