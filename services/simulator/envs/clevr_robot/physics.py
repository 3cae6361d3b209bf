"""CLEVR-Robot's physics: five balls pushed on a table, in 2-D, with collisions.

No package ships CLEVR-Robot (the original drives a MuJoCo arm). This is a plain 2-D model of
what a push does, chosen so that the released KALM transitions move the pushed ball the same way
(`evaluation/kalm_released_agreement.py` measures it):

* The state is 10 numbers, the (x, y) of the red, blue, green, purple and cyan balls.
* Action a (0..39) pushes ball a // 8 in direction a % 8: 0 +x, 1 +y, 2 -x, 3 -y, then the
  diagonals 4 (+x+y), 5 (-x+y), 6 (+x-y), 7 (-x-y) (the original's action set, which has 0.8
  per axis there; here every push, diagonal or not, slides the same distance).
* The pushed ball starts sliding at a speed that friction (constant deceleration) brings to a
  stop after `PUSH_DISTANCE` (0.2, the released data's median push is 0.17-0.24). Balls of
  radius `BALL_RADIUS` collide elastically (equal masses: the normal components of their
  velocities are exchanged, times `RESTITUTION`), so a push can knock other balls on. The table
  edges stop a ball (it rebounds with `WALL_RESTITUTION` of its speed).
* Integration: `SUBSTEPS` explicit Euler steps per action, after which everything has stopped.

The table (ball centres): x in `TABLE_X`, y in `TABLE_Y`. Episodes start from `random_state`:
x in [-0.5, 0.5], y in [-0.3, 0.6] (the released data's range), balls at least
`START_SPACING` apart.
"""

from __future__ import annotations

import math

import numpy as np

NUM_BALLS = 5
NUM_DIRECTIONS = 8
NUM_ACTIONS = NUM_BALLS * NUM_DIRECTIONS
STATE_DIM = 2 * NUM_BALLS

DIRECTIONS = np.array(
    [[1, 0], [0, 1], [-1, 0], [0, -1], [0.8, 0.8], [-0.8, 0.8], [0.8, -0.8], [-0.8, -0.8]],
    dtype=np.float64,
)
BALL_RADIUS = 0.06
PUSH_DISTANCE = 0.2
TABLE_X = (-0.6, 0.6)
TABLE_Y = (-0.4, 0.7)
START_X = (-0.5, 0.5)
START_Y = (-0.3, 0.6)
START_SPACING = 0.3
RESTITUTION = 0.9
WALL_RESTITUTION = 0.5
SUBSTEPS = 40

# A slide of speed v0 under deceleration a stops after v0² / 2a = PUSH_DISTANCE in time 1.
_DT = 1.0 / SUBSTEPS
_DECELERATION = 2 * PUSH_DISTANCE
_START_SPEED = 2 * PUSH_DISTANCE
_LOW = np.array([TABLE_X[0], TABLE_Y[0]])
_HIGH = np.array([TABLE_X[1], TABLE_Y[1]])


def split_action(action: int) -> tuple[int, int]:
    """(ball, direction) of an action id 0..39."""
    if not 0 <= int(action) < NUM_ACTIONS:
        raise ValueError(f"action: expected an integer 0..{NUM_ACTIONS - 1}, got {action!r}")
    return int(action) // NUM_DIRECTIONS, int(action) % NUM_DIRECTIONS


def valid_state(state: np.ndarray) -> bool:
    """Whether `state` is a state of this table: 10 finite numbers, every ball on the table
    and no two balls overlapping (centres at least 2 radii apart, 1e-3 slack)."""
    state = np.asarray(state, dtype=np.float64)
    if state.shape != (STATE_DIM,) or not np.isfinite(state).all():
        return False
    balls = state.reshape(NUM_BALLS, 2)
    if (balls < _LOW - 1e-6).any() or (balls > _HIGH + 1e-6).any():
        return False
    gaps = np.linalg.norm(balls[:, None] - balls[None], axis=-1)
    gaps[np.diag_indices(NUM_BALLS)] = np.inf
    return bool(gaps.min() >= 2 * BALL_RADIUS - 1e-3)


def random_state(rng: np.random.Generator) -> np.ndarray:
    """A start state: balls spread uniformly over the start area, `START_SPACING` apart."""
    while True:
        balls = np.column_stack(
            [rng.uniform(*START_X, NUM_BALLS), rng.uniform(*START_Y, NUM_BALLS)]
        )
        gaps = np.linalg.norm(balls[:, None] - balls[None], axis=-1)
        gaps[np.diag_indices(NUM_BALLS)] = np.inf
        if gaps.min() >= START_SPACING:
            return balls.reshape(-1).astype(np.float32)


def _settle(x: list[float], y: list[float], vx: list[float], vy: list[float]) -> None:
    """Separate overlapping balls; approaching pairs trade the normal parts of their
    velocities (equal masses, `RESTITUTION`)."""
    diameter = 2 * BALL_RADIUS
    for i in range(NUM_BALLS - 1):
        for j in range(i + 1, NUM_BALLS):
            dx, dy = x[j] - x[i], y[j] - y[i]
            gap2 = dx * dx + dy * dy
            if gap2 >= diameter * diameter:
                continue
            gap = math.sqrt(gap2)
            nx, ny = (dx / gap, dy / gap) if gap > 1e-9 else (1.0, 0.0)
            half = (diameter - gap) / 2
            x[i] -= nx * half
            y[i] -= ny * half
            x[j] += nx * half
            y[j] += ny * half
            closing = (vx[i] - vx[j]) * nx + (vy[i] - vy[j]) * ny
            if closing > 0:
                kick = closing * (1 + RESTITUTION) / 2
                vx[i] -= nx * kick
                vy[i] -= ny * kick
                vx[j] += nx * kick
                vy[j] += ny * kick


def _keep_on_table(x: list[float], y: list[float], vx: list[float], vy: list[float]) -> None:
    for position, velocity, (low, high) in ((x, vx, TABLE_X), (y, vy, TABLE_Y)):
        for k in range(NUM_BALLS):
            if position[k] < low or position[k] > high:
                position[k] = min(max(position[k], low), high)
                if (position[k] == low) == (velocity[k] < 0):  # moving out: rebound
                    velocity[k] *= -WALL_RESTITUTION


def push(state: np.ndarray, action: int) -> np.ndarray:
    """The state after pushing ball `action // 8` in direction `action % 8` (see module doc).

    Plain Python floats: for five balls that is several times faster than numpy."""
    ball, direction = split_action(action)
    balls = np.asarray(state, dtype=np.float64).reshape(NUM_BALLS, 2)
    x, y = balls[:, 0].tolist(), balls[:, 1].tolist()
    vx, vy = [0.0] * NUM_BALLS, [0.0] * NUM_BALLS
    unit = DIRECTIONS[direction] / np.linalg.norm(DIRECTIONS[direction])
    vx[ball], vy[ball] = (unit * _START_SPEED).tolist()
    for _ in range(SUBSTEPS):
        moving = [k for k in range(NUM_BALLS) if vx[k] or vy[k]]
        if not moving:
            break
        for k in moving:
            x[k] += vx[k] * _DT
            y[k] += vy[k] * _DT
        _keep_on_table(x, y, vx, vy)
        _settle(x, y, vx, vy)
        for k in range(NUM_BALLS):  # friction: constant deceleration until the ball stops
            speed = math.hypot(vx[k], vy[k])
            if speed:
                scale = max(speed - _DECELERATION * _DT, 0.0) / speed
                vx[k] *= scale
                vy[k] *= scale
    still = [0.0] * NUM_BALLS
    for _ in range(10):  # settle any overlap left by a ball pinned against an edge
        _settle(x, y, still, still)
        _keep_on_table(x, y, still, still)
    return np.column_stack([x, y]).reshape(-1).astype(np.float32)
