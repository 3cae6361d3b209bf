"""Offline RL datasets with one instruction and goal per episode (KALM's data, real or imagined).

An `OfflineDataset` holds N transitions of E episodes, flat and in episode order (the layout
d3rlpy's `MDPDataset` and D4RL use), plus per-episode arrays indexed by `episode_ids`:

  per transition (N rows)
    observations  (N, obs_dim) float32   the state only (no goal, no instruction)
    actions       (N,) int64             discrete action ids, or
                  (N, act_dim) float32   continuous actions
    rewards       (N,) float32
    terminals     (N,) bool              the episode ended in a terminal state (e.g. success)
    timeouts      (N,) bool              the episode was cut here (time limit, end of the data)
    episode_ids   (N,) int64             which episode each row belongs to, in 0..E-1
  per episode (E rows)
    instructions  (E,) str               the instruction the episode followed
    goals         (E, goal_dim) float32  its goal in numbers (CLEVR-Robot: the 6-number goal)
    final_observations (E, obs_dim) float32, optional: the state after the episode's last
                  action (the flat layout keeps no next observation for the last row)
  env     str   the environment id (e.g. "ClevrRobot", "MetaWorld/reach")
  source  str   "scripted" | "released" | "imagined"

Each episode's rows are contiguous and its ids increase by one from 0 (episode e's rows come
before episode e+1's); an episode need not end in a terminal or timeout row (the episode ids
mark its end).

On disk (`save`/`load`): one `.npz` with an array per field under the field's name, `env` and
`source` as 0-d unicode arrays, `format_version` (an int) and no pickles (read with
`allow_pickle=False`). `load` checks every array's shape and dtype and names the file and the
field that is wrong.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import d3rlpy

FORMAT_VERSION = 1
SOURCES = ("scripted", "released", "imagined")

_PER_TRANSITION = ("observations", "actions", "rewards", "terminals", "timeouts", "episode_ids")
_PER_EPISODE = ("instructions", "goals")
_ARRAYS = (*_PER_TRANSITION, *_PER_EPISODE, "final_observations")


class DatasetFormatError(ValueError):
    """A dataset (in memory or a file) whose fields do not have the documented shape or dtype;
    the message names the file (when there is one) and the field."""


@dataclass(frozen=True)
class Episode:
    """One episode's rows of an `OfflineDataset` (views, not copies)."""

    index: int
    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminals: np.ndarray
    timeouts: np.ndarray
    instruction: str
    goal: np.ndarray
    final_observation: np.ndarray | None

    def __len__(self) -> int:
        return len(self.rewards)


@dataclass
class OfflineDataset:
    """Transitions of instruction-following episodes; the format is in the module doc."""

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminals: np.ndarray
    timeouts: np.ndarray
    episode_ids: np.ndarray
    instructions: np.ndarray
    goals: np.ndarray
    env: str
    source: str
    final_observations: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.validate()

    # -- checks -------------------------------------------------------------------------
    def validate(self, where: str = "dataset") -> None:
        """Raise `DatasetFormatError` naming `where` and the field that breaks the format."""

        def fail(name: str, problem: str) -> None:
            raise DatasetFormatError(f"{where}: field {name!r}: {problem}")

        def check(name: str, value: Any, ndims: tuple[int, ...], dtype: str, rows: int | None):
            if not isinstance(value, np.ndarray):
                fail(name, f"expected a numpy array, got {type(value).__name__}")
            if value.ndim not in ndims:
                wanted = " or ".join(f"{n}-D" for n in ndims)
                fail(name, f"expected a {wanted} array, got shape {value.shape}")
            wrong_text = dtype == "str" and value.dtype.kind != "U"
            if wrong_text or (dtype != "str" and value.dtype != dtype):
                fail(name, f"expected dtype {dtype}, got {value.dtype}")
            if rows is not None and len(value) != rows:
                fail(name, f"expected {rows} rows, got shape {value.shape}")

        for name, text in (("env", self.env), ("source", self.source)):
            if not isinstance(text, str) or not text:
                fail(name, f"expected a non-empty string, got {text!r}")
        if self.source not in SOURCES:
            fail("source", f"expected one of {', '.join(SOURCES)}, got {self.source!r}")

        check("observations", self.observations, (2,), "float32", None)
        n = len(self.observations)
        # 1-D actions are discrete ids (int64), 2-D ones continuous vectors (float32)
        actions_ndim = self.actions.ndim if isinstance(self.actions, np.ndarray) else 1
        check("actions", self.actions, (1, 2), "int64" if actions_ndim == 1 else "float32", n)
        check("rewards", self.rewards, (1,), "float32", n)
        check("terminals", self.terminals, (1,), "bool", n)
        check("timeouts", self.timeouts, (1,), "bool", n)
        check("episode_ids", self.episode_ids, (1,), "int64", n)
        check("instructions", self.instructions, (1,), "str", None)
        e = len(self.instructions)
        check("goals", self.goals, (2,), "float32", e)
        if self.final_observations is not None:
            check("final_observations", self.final_observations, (2,), "float32", e)
            if self.final_observations.shape[1] != self.observations.shape[1]:
                fail(
                    "final_observations",
                    f"expected {self.observations.shape[1]} columns like observations, "
                    f"got shape {self.final_observations.shape}",
                )
        ids = self.episode_ids
        if n and (ids[0] != 0 or np.any(np.diff(ids) < 0) or np.any(np.diff(ids) > 1)):
            fail("episode_ids", "expected contiguous episodes numbered 0, 1, 2, ... in order")
        episodes_seen = int(ids[-1]) + 1 if n else 0
        if episodes_seen != e:
            fail("instructions", f"expected one per episode ({episodes_seen}), got {e}")
        for name in ("observations", "actions", "rewards", "goals", "final_observations"):
            value = getattr(self, name)
            if value is not None and value.dtype.kind == "f" and not np.isfinite(value).all():
                fail(name, "holds non-finite numbers")

    # -- conversion ---------------------------------------------------------------------
    @classmethod
    def from_arrays(cls, *, env: str, source: str, **arrays: Any) -> OfflineDataset:
        """Build a dataset casting each array to its documented dtype (float32, int64, bool,
        str); use it when arrays come from elsewhere (lists, float64, int32)."""
        cast = {
            "observations": np.float32,
            "rewards": np.float32,
            "terminals": bool,
            "timeouts": bool,
            "episode_ids": np.int64,
            "instructions": str,
            "goals": np.float32,
            "final_observations": np.float32,
        }
        values: dict[str, Any] = {}
        for name, value in arrays.items():
            if name not in _ARRAYS:
                raise DatasetFormatError(f"dataset: unknown field {name!r}; fields: {_ARRAYS}")
            if value is None:
                values[name] = None
                continue
            array = np.asarray(value)
            if name == "actions":
                array = array.astype(np.int64 if array.ndim == 1 else np.float32)
            else:
                array = array.astype(cast[name])
            values[name] = array
        return cls(env=env, source=source, **values)

    @property
    def num_episodes(self) -> int:
        return len(self.instructions)

    @property
    def discrete(self) -> bool:
        """Whether actions are discrete ids (1-D integers) rather than continuous vectors."""
        return self.actions.ndim == 1

    def __len__(self) -> int:
        return len(self.observations)

    def episode_bounds(self) -> np.ndarray:
        """(E + 1,) row offsets: episode e is rows `bounds[e]:bounds[e + 1]`."""
        counts = np.bincount(self.episode_ids, minlength=self.num_episodes)
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def episodes(self) -> Iterator[Episode]:
        """The episodes in order, as views into the arrays."""
        bounds = self.episode_bounds()
        for e in range(self.num_episodes):
            rows = slice(bounds[e], bounds[e + 1])
            yield Episode(
                index=e,
                observations=self.observations[rows],
                actions=self.actions[rows],
                rewards=self.rewards[rows],
                terminals=self.terminals[rows],
                timeouts=self.timeouts[rows],
                instruction=str(self.instructions[e]),
                goal=self.goals[e],
                final_observation=(
                    None if self.final_observations is None else self.final_observations[e]
                ),
            )

    def to_mdp_dataset(
        self,
        with_instruction_embeddings: np.ndarray | None = None,
        action_size: int | None = None,
    ) -> d3rlpy.dataset.MDPDataset:
        """The transitions as d3rlpy's `MDPDataset`, one d3rlpy episode per episode here.

        `with_instruction_embeddings`, an (E, k) array (e.g. each episode's instruction
        sentence embedding), is appended to every observation of its episode, so the policy
        sees state + instruction. Episodes that end in neither a terminal nor a timeout row
        are given a timeout there, so d3rlpy does not join them with the next.
        `action_size` is the number of discrete actions (default: the largest id seen + 1;
        give it when some actions never occur, e.g. 40 for CLEVR-Robot).

        d3rlpy takes a transition's next observation from the following row, so it keeps
        only size - 1 transitions of an episode that does not end in a terminal. With
        `final_observations`, each such episode gets one more row holding its final
        observation (reward 0, the last action repeated; it is never a transition of its own,
        only the last one's next observation and next action), so every step is kept. Without
        them the last step of those episodes is lost.
        """
        import d3rlpy  # lazy: d3rlpy (and torch) only for the offline-RL side

        observations = self.observations
        if with_instruction_embeddings is not None:
            embeddings = np.asarray(with_instruction_embeddings, dtype=np.float32)
            if embeddings.ndim != 2 or len(embeddings) != self.num_episodes:
                raise DatasetFormatError(
                    f"with_instruction_embeddings: expected shape ({self.num_episodes}, k), one "
                    f"row per episode, got {embeddings.shape}"
                )
            observations = np.concatenate([observations, embeddings[self.episode_ids]], axis=1)
        ends = self.episode_bounds()[1:]
        last_rows = ends - 1
        rewards, terminals = self.rewards, self.terminals
        timeouts = self.timeouts.copy()
        timeouts[last_rows] = True
        timeouts &= ~terminals  # d3rlpy refuses a row that is both
        actions = self.actions.reshape(-1, 1) if self.discrete else self.actions
        if self.final_observations is not None and len(self):
            cut = ~terminals[last_rows]
            at, rows = ends[cut], last_rows[cut]
            finals = self.final_observations[cut]
            if with_instruction_embeddings is not None:
                finals = np.concatenate([finals, embeddings[cut]], axis=1)
            observations = np.insert(observations, at, finals, axis=0)
            actions = np.insert(actions, at, actions[rows], axis=0)
            rewards = np.insert(rewards, at, 0.0)
            terminals = np.insert(terminals, at, False)
            timeouts[rows] = False
            timeouts = np.insert(timeouts, at, True)
        if self.discrete:
            space = d3rlpy.ActionSpace.DISCRETE
            seen = int(self.actions.max()) + 1 if len(self) else 1
            if action_size is not None and action_size < seen:
                raise DatasetFormatError(
                    f"action_size: {action_size} is less than the largest action id + 1 ({seen})"
                )
            size = action_size or seen
        else:
            space = d3rlpy.ActionSpace.CONTINUOUS
            size = self.actions.shape[1]
        return d3rlpy.dataset.MDPDataset(
            observations=np.ascontiguousarray(observations, dtype=np.float32),
            actions=actions,
            rewards=rewards.reshape(-1, 1),
            terminals=terminals.astype(np.float32),
            timeouts=timeouts.astype(np.float32),
            action_space=space,
            action_size=size,
        )

    # -- combining ----------------------------------------------------------------------
    @staticmethod
    def concatenate(*datasets: OfflineDataset) -> OfflineDataset:
        """One dataset with the episodes of each in turn (episode ids renumbered).

        All must share the env and the observation, action and goal layout. The result keeps
        the first dataset's `source` (e.g. real data first, then "imagined" episodes appended).
        """
        if not datasets:
            raise ValueError("concatenate: needs at least one dataset")
        first = datasets[0]
        for i, other in enumerate(datasets[1:], start=1):
            for name, a, b in (
                ("observations", first.observations.shape[1:], other.observations.shape[1:]),
                ("actions", first.actions.shape[1:], other.actions.shape[1:]),
                ("goals", first.goals.shape[1:], other.goals.shape[1:]),
            ):
                if a != b:
                    raise DatasetFormatError(
                        f"concatenate: dataset {i} field {name!r} has rows of shape {b}, "
                        f"dataset 0 {a}"
                    )
            if other.env != first.env:
                raise DatasetFormatError(
                    f"concatenate: dataset {i} is for env {other.env!r}, "
                    f"dataset 0 for {first.env!r}"
                )
        offsets = np.cumsum([0] + [d.num_episodes for d in datasets[:-1]])
        finals = [d.final_observations for d in datasets]
        return OfflineDataset(
            observations=np.concatenate([d.observations for d in datasets]),
            actions=np.concatenate([d.actions for d in datasets]),
            rewards=np.concatenate([d.rewards for d in datasets]),
            terminals=np.concatenate([d.terminals for d in datasets]),
            timeouts=np.concatenate([d.timeouts for d in datasets]),
            episode_ids=np.concatenate(
                [d.episode_ids + offset for d, offset in zip(datasets, offsets, strict=True)]
            ).astype(np.int64),
            instructions=np.concatenate([d.instructions for d in datasets]),
            goals=np.concatenate([d.goals for d in datasets]),
            env=first.env,
            source=first.source,
            final_observations=(None if any(f is None for f in finals) else np.concatenate(finals)),
        )

    # -- files --------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the dataset to `path` (a `.npz`, see the module doc); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {name: getattr(self, name) for name in _ARRAYS if getattr(self, name) is not None}
        with path.open("wb") as file:
            np.savez_compressed(
                file,
                **arrays,
                env=np.array(self.env),
                source=np.array(self.source),
                format_version=np.array(FORMAT_VERSION),
            )
        return path

    @classmethod
    def load(cls, path: str | Path) -> OfflineDataset:
        """Read a dataset written by `save`; `DatasetFormatError` names the file and field
        that is missing or has the wrong shape or dtype."""
        path = Path(path)
        try:
            npz = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as error:
            raise DatasetFormatError(f"{path}: not a readable .npz dataset ({error})") from error
        if not isinstance(npz, np.lib.npyio.NpzFile):  # a .npy file: one bare array
            raise DatasetFormatError(f"{path}: not a .npz dataset (it holds a single array)")
        with npz:
            names = set(npz.files)
            required = {*_PER_TRANSITION, *_PER_EPISODE, "env", "source", "format_version"}
            missing = sorted(required - names)
            if missing:
                raise DatasetFormatError(f"{path}: field {missing[0]!r} is missing")
            try:
                values = {name: npz[name] for name in names}
            except ValueError as error:  # an object array: it would need pickles
                raise DatasetFormatError(f"{path}: holds pickled data ({error})") from error
        version = values.pop("format_version")
        if version.shape != () or version.dtype.kind not in "iu" or int(version) != FORMAT_VERSION:
            raise DatasetFormatError(
                f"{path}: field 'format_version': expected {FORMAT_VERSION}, got {version!r}"
            )
        texts = {}
        for name in ("env", "source"):
            value = values.pop(name)
            if value.shape != () or value.dtype.kind != "U":
                raise DatasetFormatError(f"{path}: field {name!r}: expected a string")
            texts[name] = str(value)
        extra = sorted(set(values) - set(_ARRAYS))
        if extra:
            raise DatasetFormatError(f"{path}: field {extra[0]!r} is not part of the format")
        dataset = cls.__new__(cls)
        for field in dataclasses.fields(cls):
            setattr(dataset, field.name, values.get(field.name, texts.get(field.name)))
        dataset.validate(where=str(path))
        return dataset


def concatenate(*datasets: OfflineDataset) -> OfflineDataset:
    """`OfflineDataset.concatenate` as a function."""
    return OfflineDataset.concatenate(*datasets)
