"""Meta-World's goals read off its 39-number v3 observation, for imagined rollouts.

An imagined rollout has no simulator behind it, only observations, so the two checks the
imagination needs are functions of an observation:

* `success(task, state, goal)`: Meta-World v3's own success test of the task (its
  `evaluate_state`), written on the observation: the distance from the task's object (or the
  hand) to the goal position `goal` (the episode's, from its real initial state), on the axes
  and with the threshold Meta-World uses. The simulator reads the same positions from MuJoCo
  (`_get_pos_objects`, which is what the observation carries); where Meta-World measures from
  the gripper's finger centre (reach) or a joint (hammer: the nail's slide joint), the
  observation's nearest stand-in is used (the hand; the nail's position against its goal).
  `expert_agreement` measures how often it agrees with the simulator's own flag on the
  scripted experts' episodes (README: 95-100% of steps per task).
* `valid_state(state)`: finite, and within bounds: the hand (now and in the previous frame)
  in Meta-World's own hand space (`SawyerXYZEnv._HAND_SPACE`, the arm's reachable box), the
  gripper opening in Meta-World's declared [-1, 1], quaternion components in [-1, 1], and every
  object and goal position within the hand space widened by `OBJECT_MARGIN` on each side
  (Meta-World declares objects unbounded; an object half a metre beyond anything the hand can
  reach has left the table, which is about 1.0 x 0.7 m; the zero padding of a missing second
  object lies inside).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STATE_DIM = 39
HAND, GRIPPER, OBJECT, OBJECT2, GOAL = slice(0, 3), 3, slice(4, 7), slice(11, 14), slice(36, 39)
QUATERNIONS = (slice(7, 11), slice(14, 18), slice(25, 29), slice(32, 36))
POSITIONS = (slice(4, 7), slice(11, 14), slice(22, 25), slice(29, 32), GOAL)
PREVIOUS_HAND, PREVIOUS_GRIPPER = slice(18, 21), 21
# Meta-World v3's SawyerXYZEnv._HAND_SPACE (tested against the package)
HAND_LOW = np.array([-0.525, 0.348, -0.0525], np.float32)
HAND_HIGH = np.array([0.525, 1.025, 0.7], np.float32)
OBJECT_MARGIN = 0.5


@dataclass(frozen=True)
class GoalTest:
    """Success when |(part - target) * scale| over `axes` <= `threshold`; `target_z` replaces
    the goal's height (basketball: Meta-World aims just above the hoop)."""

    part: slice
    threshold: float
    axes: tuple[int, ...] = (0, 1, 2)
    scale: tuple[float, float, float] = (1.0, 1.0, 1.0)
    target_z: float | None = None


# Meta-World v3's success thresholds (metaworld/envs/sawyer_*_v3.py, evaluate_state)
GOAL_TESTS: dict[str, GoalTest] = {
    "reach": GoalTest(HAND, 0.05),
    "push": GoalTest(OBJECT, 0.05),
    "pick-place": GoalTest(OBJECT, 0.07),
    "reach-wall": GoalTest(HAND, 0.05),
    "push-wall": GoalTest(OBJECT, 0.07),
    "pick-place-wall": GoalTest(OBJECT, 0.07),
    "button-press-wall": GoalTest(OBJECT, 0.03, axes=(1,)),
    "door-lock": GoalTest(OBJECT, 0.02, axes=(2,)),
    "door-close": GoalTest(OBJECT, 0.08),
    "window-close": GoalTest(OBJECT, 0.05, axes=(0,)),
    "faucet-close": GoalTest(OBJECT, 0.07),
    "hammer": GoalTest(OBJECT2, 0.05, axes=(1,)),
    "soccer": GoalTest(OBJECT, 0.07),
    "sweep-into": GoalTest(OBJECT, 0.05, axes=(0, 1)),
    "basketball": GoalTest(OBJECT, 0.08, scale=(1.0, 1.0, 2.0), target_z=0.3),
    "push-back": GoalTest(OBJECT, 0.07),
    "coffee-pull": GoalTest(OBJECT, 0.07, scale=(2.0, 2.0, 1.0)),
}


def goal_distance(task: str, state: np.ndarray, goal: np.ndarray) -> float:
    """The distance Meta-World's success test of `task` compares with its threshold."""
    if task not in GOAL_TESTS:
        raise ValueError(
            f"task: no success test on observations for {task!r}; tasks: {', '.join(GOAL_TESTS)}"
        )
    test = GOAL_TESTS[task]
    state = np.asarray(state, np.float64)
    target = np.asarray(goal, np.float64).copy()
    if test.target_z is not None:
        target[2] = test.target_z
    delta = (state[test.part] - target) * np.asarray(test.scale)
    return float(np.linalg.norm(delta[list(test.axes)]))


def success(task: str, state: np.ndarray, goal: np.ndarray) -> bool:
    """Whether `state` meets `task`'s goal at position `goal` (Meta-World's test, see above)."""
    state = np.asarray(state)
    if state.shape != (STATE_DIM,) or not np.isfinite(state).all():
        return False
    return goal_distance(task, state, goal) <= GOAL_TESTS[task].threshold


def valid_state(state: np.ndarray) -> bool:
    """Finite and within the bounds the module doc gives."""
    state = np.asarray(state, np.float64)
    if state.shape != (STATE_DIM,) or not np.isfinite(state).all():
        return False
    for hand in (HAND, PREVIOUS_HAND):
        if np.any(state[hand] < HAND_LOW) or np.any(state[hand] > HAND_HIGH):
            return False
    if abs(state[GRIPPER]) > 1.0 or abs(state[PREVIOUS_GRIPPER]) > 1.0:
        return False
    if any(np.abs(state[q]).max() > 1.0 for q in QUATERNIONS):
        return False
    low, high = HAND_LOW - OBJECT_MARGIN, HAND_HIGH + OBJECT_MARGIN
    return all(np.all(state[p] >= low) and np.all(state[p] <= high) for p in POSITIONS)


def expert_agreement(task: str, episodes: int = 1, seed: int = 0, steps: int = 200) -> float:
    """The share of steps of `task`'s scripted expert (Meta-World's `metaworld.policies`) at
    which `success` agrees with the simulator's success flag (needs `metaworld`)."""
    import warnings

    from llmrl.simulator.envs.metaworld_tasks import expert_policy, make_task_env

    env, expert = make_task_env(task), expert_policy(task)
    agree = total = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the experts warn whenever a gain is clipped
        for episode in range(episodes):
            env.seed(seed + episode)
            observation, _ = env.reset()
            goal = observation[GOAL].copy()
            for _ in range(steps):
                action = np.clip(expert.get_action(observation), -1.0, 1.0)
                observation, _, _, _, info = env.step(action)
                agree += success(task, observation, goal) == bool(info["success"])
                total += 1
    env.close()
    return agree / total
