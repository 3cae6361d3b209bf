"""KALM's released toy datasets (`clevr_robot.npy`, `meta_world.npy`) as `OfflineDataset`s.

The files are pickled dicts in `.npy` (`llmrl data get kalm` fetches them). They are read
with `llmrl.common.safe_numpy` (a restricted unpickler: numpy arrays and plain data only, never
`allow_pickle=True`), every key checked for shape and dtype, and a wrong file refused with
an error naming the file and the key.

CLEVR-Robot: 80 trajectories padded to 50 steps; `masks` marks the real steps. Each trajectory
becomes one episode (or one per phrasing with `phrasings="all"`: the 54 phrasings of its goal);
`goals` are the 6-number goals (the same for every step of a trajectory), `final_observations`
the state after the last real step. The layout is `ClevrRobot`'s, so the data mixes with ours.

Meta-World: 10 trajectories of Meta-World *v2* tasks, 100 steps, 91-number observations. v3's
(the `MetaWorld` env) are 39 numbers (hand 3, gripper 1, two objects' positions and quaternions
14, the same for the previous frame 18, goal 3); the v2 file's layout (hand 3, gripper 1, then
padded object slots up to 91) has no exact v3 counterpart, so this loader keeps the 91 numbers
and names the env "MetaWorld-v2": it is not concatenated with v3 data (`OfflineDataset` refuses
the shape mismatch). `goals` are the 3-number goal positions.

`physics_agreement` replays every released CLEVR-Robot transition in our physics and reports
how often our push moves the pushed ball the same way; `label_agreement` checks the released
success labels against our success function.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from llmrl.common.datasets import KALM, dataset_dir, missing_hint
from llmrl.common.offline_dataset import DatasetFormatError, OfflineDataset
from llmrl.common.safe_numpy import load_npy
from llmrl.simulator.envs import clevr_robot

DATA_ENV_VAR = KALM.env_var
CLEVR_FILE, METAWORLD_FILE = "clevr_robot.npy", "meta_world.npy"


def released_dir() -> Path | None:
    """Where KALM's released files are: `dataset_dir("kalm")` ($LLMRL_KALM_DATA, else the copy
    `llmrl data get kalm` wrote under LLMRL_HOME), or None."""
    return dataset_dir("kalm")


def released_file(name: str, override: str | Path | None = None) -> Path:
    """KALM's released file `name`: `override` (the recipe's `released_path`) when given,
    else `name` in `released_dir()`; a FileNotFoundError says how to get it."""
    if override:
        return Path(override)
    directory = released_dir()
    if directory is None:
        raise FileNotFoundError(
            f"released_path: KALM's released {name} was not found on this machine; "
            f"{missing_hint('kalm')}, set released_path, or use data=[scripted]"
        )
    return directory / name


# key: (dtype kind(s), shape with None for "any size"); checked against each other below.
CLEVR_KEYS: dict[str, tuple[str, tuple[int | None, ...]]] = {
    "observations": ("f", (None, None, 10)),
    "next_observations": ("f", (None, None, 10)),
    "actions": ("iu", (None, None)),
    "rewards": ("f", (None, None, 1)),
    "terminals": ("bf", (None, None, 1)),
    "masks": ("iufb", (None, None)),
    "goals": ("f", (None, None, 6)),
    "instructions": ("U", (None, None)),
}
METAWORLD_KEYS: dict[str, tuple[str, tuple[int | None, ...]]] = {
    "observations": ("f", (None, None, None)),
    "next_observations": ("f", (None, None, None)),
    "actions": ("f", (None, None, 4)),
    "rewards": ("f", (None, None, 1)),
    "terminals": ("bf", (None, None, 1)),
    "masks": ("iufb", (None, None, 1)),
    "goals": ("f", (None, 3)),
    "env_names": ("U", (None,)),
    "instructions": ("U", (None, None)),
}


def read_released(
    path: str | Path, keys: dict[str, tuple[str, tuple[int | None, ...]]]
) -> dict[str, np.ndarray]:
    """The released file's dict, each of `keys` checked: present, a numpy array of the dtype
    kind and shape given, and all agreeing on the number of trajectories and steps."""
    path = Path(path)
    try:
        content = load_npy(path)
    except FileNotFoundError:
        raise DatasetFormatError(f"{path}: no such file") from None
    except (ValueError, EOFError) as error:  # includes UnsafePickleError
        raise DatasetFormatError(f"{path}: not a KALM dataset file ({error})") from error
    data = content.item() if content.dtype == object and content.shape == () else None
    if not isinstance(data, dict):
        raise DatasetFormatError(f"{path}: expected a pickled dict of arrays")
    sizes: dict[int, tuple[str, int]] = {}  # axis -> (first key that fixed it, size)
    for key, (kinds, shape) in keys.items():
        if key not in data:
            raise DatasetFormatError(f"{path}: key {key!r} is missing")
        value = data[key]
        if not isinstance(value, np.ndarray) or value.dtype.kind not in kinds:
            got = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
            raise DatasetFormatError(f"{path}: key {key!r}: expected dtype kind {kinds!r}, "
                                     f"got {got}")  # fmt: skip
        if value.ndim != len(shape) or any(
            want is not None and got != want for want, got in zip(shape, value.shape, strict=True)
        ):
            wanted = tuple("N" if s is None else s for s in shape)
            raise DatasetFormatError(f"{path}: key {key!r}: expected shape {wanted}, "
                                     f"got {value.shape}")  # fmt: skip
        # axis 0 counts trajectories; axis 1 steps, except in per-trajectory keys (phrasings,
        # task names, Meta-World's goals)
        per_trajectory = key in ("env_names", "instructions") or (
            key == "goals" and value.ndim == 2
        )
        for axis in range(1 if per_trajectory else min(2, value.ndim)):
            first = sizes.setdefault(axis, (key, value.shape[axis]))
            if first[1] != value.shape[axis]:
                raise DatasetFormatError(
                    f"{path}: key {key!r}: {value.shape[axis]} "
                    f"{'trajectories' if axis == 0 else 'steps'}, but {first[0]!r} has {first[1]}"
                )
    return data


def _real_steps(masks: np.ndarray, path: Path) -> np.ndarray:
    """(T, S) bool of the real steps; each trajectory's must come first and be at least one."""
    real = masks.reshape(masks.shape[0], -1) > 0
    lengths = real.sum(axis=1)
    if (lengths == 0).any() or any(not real[t, : lengths[t]].all() for t in range(len(real))):
        raise DatasetFormatError(
            f"{path}: key 'masks': every trajectory needs its real steps first, at least one"
        )
    return real


def _flatten(data: dict[str, np.ndarray], real: np.ndarray, repeats: int) -> dict[str, np.ndarray]:
    """Per-transition arrays of the real steps, the trajectories repeated `repeats` times each
    (one copy per phrasing), in trajectory order."""
    order = np.repeat(np.arange(len(real)), repeats)
    rows = [(t, np.flatnonzero(real[t])) for t in order]
    take = lambda key: np.concatenate([data[key][t, steps] for t, steps in rows])  # noqa: E731
    lengths = [len(steps) for _, steps in rows]
    ends = np.cumsum(lengths) - 1
    terminals = take("terminals").reshape(-1).astype(bool)
    timeouts = np.zeros_like(terminals)
    timeouts[ends] = ~terminals[ends]  # a trajectory cut without success ends in a timeout
    return {
        "observations": take("observations"),
        "actions": take("actions"),
        "rewards": take("rewards").reshape(-1),
        "terminals": terminals,
        "timeouts": timeouts,
        "episode_ids": np.repeat(np.arange(len(rows)), lengths),
        "final_observations": np.stack(
            [data["next_observations"][t, steps[-1]] for t, steps in rows]
        ),
    }


def load_released_clevr(
    path: str | Path, phrasings: Literal["first", "all"] = "first"
) -> OfflineDataset:
    """KALM's `clevr_robot.npy` as a "released" `ClevrRobot` dataset (see the module doc)."""
    path = Path(path)
    if phrasings not in ("first", "all"):
        raise ValueError(f"phrasings: expected 'first' or 'all', got {phrasings!r}")
    data = read_released(path, CLEVR_KEYS)
    actions = data["actions"]
    if actions.size and (actions.min() < 0 or actions.max() >= clevr_robot.NUM_ACTIONS):
        raise DatasetFormatError(f"{path}: key 'actions': expected ids 0..39")
    real = _real_steps(data["masks"], path)
    texts = data["instructions"]
    repeats = texts.shape[1] if phrasings == "all" else 1
    arrays = _flatten(data, real, repeats)
    return OfflineDataset.from_arrays(
        env="ClevrRobot",
        source="released",
        goals=np.repeat(data["goals"][:, 0], repeats, axis=0),
        instructions=texts.reshape(-1) if phrasings == "all" else texts[:, 0],
        **arrays,
    )


def load_released_metaworld(path: str | Path) -> OfflineDataset:
    """KALM's `meta_world.npy` as a "released" `MetaWorld-v2` dataset (91-number observations,
    see the module doc); one episode per task, with its first phrasing."""
    path = Path(path)
    data = read_released(path, METAWORLD_KEYS)
    real = _real_steps(data["masks"], path)
    arrays = _flatten(data, real, 1)
    return OfflineDataset.from_arrays(
        env="MetaWorld-v2",
        source="released",
        goals=data["goals"],
        instructions=data["instructions"][:, 0],
        **arrays,
    )


def released_instructions(path: str | Path) -> dict[str, list[str]]:
    """Meta-World: each task's 20 released phrasings, by task name."""
    data = read_released(path, METAWORLD_KEYS)
    return {
        str(name): [str(t) for t in texts]
        for name, texts in zip(data["env_names"], data["instructions"], strict=True)
    }


# -- agreement with our CLEVR-Robot ------------------------------------------------------
@dataclass(frozen=True)
class PhysicsAgreement:
    """How our physics replays the released CLEVR-Robot transitions."""

    transitions: int  # real transitions replayed
    pushes: int  # those whose recorded pushed ball moved more than `min_move`
    same_direction: int  # of `pushes`: our push moves that ball within 45° of the recorded way
    median_length_ratio: float  # of `pushes`: median of our / recorded displacement length
    bystanders_moved: float  # share of transitions where the recording moved another ball
    bystanders_moved_ours: float  # the same in our replay

    @property
    def rate(self) -> float:
        return self.same_direction / self.pushes if self.pushes else float("nan")


def physics_agreement(path: str | Path, min_move: float = 0.05) -> PhysicsAgreement:
    """Replay every real released transition from its recorded state with our `push` and
    compare the pushed ball's displacement with the recorded one (see `PhysicsAgreement`)."""
    data = read_released(path, CLEVR_KEYS)
    real = _real_steps(data["masks"], Path(path))
    same = pushes = 0
    ratios, recorded_bystanders, our_bystanders = [], [], []
    for t, k in zip(*np.nonzero(real), strict=True):
        state, recorded = data["observations"][t, k], data["next_observations"][t, k]
        ball, _ = clevr_robot.split_action(int(data["actions"][t, k]))
        ours = clevr_robot.push(state, int(data["actions"][t, k]))
        moves_recorded = (recorded - state).reshape(-1, 2)
        moves_ours = (ours - state).reshape(-1, 2)
        others = np.arange(len(moves_ours)) != ball
        recorded_bystanders.append(np.linalg.norm(moves_recorded[others], axis=1).max() > min_move)
        our_bystanders.append(np.linalg.norm(moves_ours[others], axis=1).max() > min_move)
        length = float(np.linalg.norm(moves_recorded[ball]))
        if length <= min_move:
            continue
        pushes += 1
        ours_length = float(np.linalg.norm(moves_ours[ball]))
        ratios.append(ours_length / length)
        if ours_length > 0:
            cosine = float(moves_recorded[ball] @ moves_ours[ball]) / (length * ours_length)
            same += cosine >= np.cos(np.pi / 4)
    return PhysicsAgreement(
        transitions=int(real.sum()),
        pushes=pushes,
        same_direction=int(same),
        median_length_ratio=float(np.median(ratios)) if ratios else float("nan"),
        bystanders_moved=float(np.mean(recorded_bystanders)),
        bystanders_moved_ours=float(np.mean(our_bystanders)),
    )


@dataclass(frozen=True)
class LabelAgreement:
    """The released success labels (terminals) against our success function."""

    trajectories: int
    final_states_successful: int  # trajectories whose final state our success function accepts
    steps: int  # real steps
    steps_agreeing: int  # steps whose terminal flag equals our success on the next state


def label_agreement(path: str | Path) -> LabelAgreement:
    data = read_released(path, CLEVR_KEYS)
    real = _real_steps(data["masks"], Path(path))
    final = agreeing = 0
    for t in range(len(real)):
        steps = np.flatnonzero(real[t])
        goal = data["goals"][t, 0]
        final += clevr_robot.success(data["next_observations"][t, steps[-1]], goal)
        for k in steps:
            ours = clevr_robot.success(data["next_observations"][t, k], data["goals"][t, k])
            agreeing += ours == bool(data["terminals"][t, k, 0])
    return LabelAgreement(len(real), int(final), int(real.sum()), int(agreeing))


def describe(agreement: Any) -> str:
    """One line per figure, for logs and the README."""
    if isinstance(agreement, PhysicsAgreement):
        return (
            f"{agreement.same_direction}/{agreement.pushes} released pushes "
            f"({agreement.rate:.1%}) move the pushed ball the same way in our physics "
            f"(within 45 degrees; {agreement.transitions} transitions, "
            f"{agreement.transitions - agreement.pushes} moved it <= 0.05); median length "
            f"ratio ours/recorded {agreement.median_length_ratio:.2f}; another ball moved in "
            f"{agreement.bystanders_moved:.0%} of recorded steps, "
            f"{agreement.bystanders_moved_ours:.0%} of ours"
        )
    return (
        f"our success function accepts {agreement.final_states_successful}/"
        f"{agreement.trajectories} released final states and agrees with "
        f"{agreement.steps_agreeing}/{agreement.steps} step labels"
    )
