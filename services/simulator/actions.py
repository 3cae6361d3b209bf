"""A world's actions: which action spaces a world carries, and the checks every batch passes.

A world's env takes one of two kinds of low-level action (`action` on the wire):

* `Discrete(n, start)`: one integer per env; on the wire INT64, bounded start..start+n-1.
* a floating-point `Box(low, high, shape)` (continuous control): one array of `shape` per env;
  on the wire FLOAT or DOUBLE (the box's dtype) with the box's bounds.

Skill envs (`SkillEnv`) also take `skill`: one text per env, "" meaning "take `action`".

Every action of a batch is checked (dtype, shape, bounds, finite values, skill names) before
any env steps, so that bad input never leaves a batch half-stepped; the error names the action
and what is allowed. An env that is being reset ignores its action, so only the envs that take
a step are checked against the bounds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from llmrl.simulator.errors import WorldError

ActionSpace = spaces.Discrete | spaces.Box


def check_action_space(space: spaces.Space) -> ActionSpace:
    """The env's action space, if a world can carry it (Discrete or floating-point Box)."""
    if isinstance(space, spaces.Discrete):
        return space
    if isinstance(space, spaces.Box) and np.dtype(space.dtype).kind == "f":
        return space
    raise TypeError(
        f"a world's env needs a Discrete or a floating-point Box action space, got {space}"
    )


def describe_action_space(space: ActionSpace) -> str:
    """What an action of `space` is, bounds included, for error messages."""
    if isinstance(space, spaces.Discrete):
        low = int(space.start)
        return f"integers {low}..{low + int(space.n) - 1}"
    return f"{np.dtype(space.dtype).name} arrays of shape {space.shape}, {_box_bounds(space)}"


def _box_bounds(space: spaces.Box) -> str:
    low, high = space.low.ravel(), space.high.ravel()
    if low.size and (low == low[0]).all() and (high == high[0]).all():
        return f"each element in [{format_numbers(low[0])}, {format_numbers(high[0])}]"
    return f"elements from low {format_numbers(space.low)} to high {format_numbers(space.high)}"


def format_numbers(values: Any) -> str:
    """`[0.5, -1]`: numbers as a reader writes them (nested lists for arrays)."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim == 0:
        return f"{float(array):.6g}"
    return "[" + ", ".join(format_numbers(row) for row in array) + "]"


def check_actions(
    action: Any,
    skill: Any,
    num_envs: int,
    action_space: ActionSpace,
    has_skills: bool,
    stepping: np.ndarray,
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Validate a batch's `action` and `skill`; return them as arrays (actions in the space's
    dtype for a Box).

    `stepping[i]` says whether env i takes a step (is not being reset): only those need an
    action or a skill, and only their actions must lie within the bounds.
    """
    actions = None
    if action is not None:
        if isinstance(action_space, spaces.Discrete):
            actions = _check_discrete(np.asarray(action), num_envs, action_space, stepping)
        else:
            actions = _check_box(np.asarray(action), num_envs, action_space, stepping)
    skills = None if skill is None else _check_skills(skill, num_envs, has_skills)
    needs_action = stepping if skills is None else stepping & (skills == "")
    if actions is None and needs_action.any():
        first = int(np.flatnonzero(needs_action)[0])
        what = "an action" if skills is None else "an action or a non-empty skill"
        raise WorldError("action", f"env {first} takes a step and needs {what}")
    return actions, skills


def _check_discrete(
    actions: np.ndarray, num_envs: int, space: spaces.Discrete, stepping: np.ndarray
) -> np.ndarray:
    if actions.dtype.kind not in "iu":
        raise WorldError("action", f"expected integers, got dtype {actions.dtype}")
    if actions.shape != (num_envs,):
        raise WorldError(
            "action", f"expected shape ({num_envs},) (one per env), got {actions.shape}"
        )
    low, high = int(space.start), int(space.start + space.n - 1)
    outside = stepping & ((actions < low) | (actions > high))
    if outside.any():
        bad = int(np.flatnonzero(outside)[0])
        raise WorldError(
            f"action[{bad}]", f"{int(actions[bad])} is out of range; allowed {low}..{high}"
        )
    return actions


def _check_box(
    actions: np.ndarray, num_envs: int, space: spaces.Box, stepping: np.ndarray
) -> np.ndarray:
    if actions.dtype.kind != "f":
        raise WorldError(
            "action",
            f"expected floats ({describe_action_space(space)}), got dtype {actions.dtype}",
        )
    shape = (num_envs, *space.shape)
    if actions.shape != shape:
        raise WorldError(
            "action",
            f"expected shape {shape} (one array of shape {space.shape} per env), "
            f"got {actions.shape}",
        )
    actions = as_box_dtype(actions, space)  # what the envs get is what is checked
    rows = actions.reshape(num_envs, -1)
    finite = np.isfinite(rows).all(axis=1)
    inside = ((rows >= space.low.ravel()) & (rows <= space.high.ravel())).all(axis=1)
    refused = stepping & ~(finite & inside)
    if refused.any():
        bad = int(np.flatnonzero(refused)[0])
        problem = "is not finite" if not finite[bad] else "is out of bounds"
        raise WorldError(
            f"action[{bad}]",
            f"{format_numbers(actions[bad])} {problem}; allowed {_box_bounds(space)}",
        )
    return actions


def as_box_dtype(actions: np.ndarray, space: spaces.Box) -> np.ndarray:
    """Float actions in the box's dtype (a float64 beyond float32's range becomes inf, which
    the bounds check then refuses)."""
    with np.errstate(over="ignore"):
        return actions.astype(space.dtype, copy=False)


def _check_skills(skill: Any, num_envs: int, has_skills: bool) -> np.ndarray:
    if not has_skills:
        raise WorldError("skill", "this env has no skill-level actions; send `action`")
    skills = np.asarray(skill)
    if skills.dtype.kind != "U" and not (skills.size == 0 and skills.dtype.kind == "f"):
        raise WorldError("skill", f"expected strings, got dtype {skills.dtype}")
    if skills.shape != (num_envs,):
        raise WorldError("skill", f"expected shape ({num_envs},) (one per env), got {skills.shape}")
    return skills.astype(str)


def env_action(value: np.generic | np.ndarray) -> int | np.ndarray:
    """One env's row of a checked batch as its env takes it: an int (Discrete) or an array
    of its own (Box), so that an env that keeps its action does not keep a view of the batch."""
    if value.dtype.kind in "iu":
        return int(value)
    return np.array(value)
