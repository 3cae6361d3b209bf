"""Reading the real Housekeep benchmark data (episodes and human annotations) from a directory.

The data is never part of the project: users get it with `llmrl data get housekeep`, or point
`data_dir` (or the environment variable LLMRL_HOUSEKEEP_DATA) at a copy laid out like this:

    data.npy                              annotator ranks [room|receptacle, object, annotator]
    splits.yaml                           the benchmark's scene and object splits
    episodes/{train,val,test}/<Scene>.json.gz

Files are read once per process (episode files are several MB of JSON) and cached.
"""

from __future__ import annotations

import gzip
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from llmrl.common.datasets import HOUSEKEEP, dataset_dir, missing_hint
from llmrl.common.paths import PathOutsideRootsError, confine
from llmrl.common.safe_numpy import load_npy
from llmrl.simulator.errors import WorldError

from .house import House, HouseObject, Receptacle, sanitize_name, unique_names

DATA_ENV_VAR = HOUSEKEEP.env_var
SPLITS = ("train", "val", "test")
OUTSIDE_ROOM = "outside"  # receptacles whose key says room "None" (windows, doors...)


def default_data_dir() -> Path | None:
    """The data directory `dataset_dir` finds ($LLMRL_HOUSEKEEP_DATA, else the copy `llmrl
    data get housekeep` wrote under LLMRL_HOME), or None."""
    return dataset_dir("housekeep")


def check_data_dir(data_dir: str | Path) -> Path:
    try:  # any CreateWorld or run config sets it: only configured data roots are read
        confine(data_dir, "data_dir")
    except PathOutsideRootsError as exc:
        raise WorldError("data_dir", str(exc).removeprefix("data_dir: ")) from None
    path = Path(data_dir).expanduser()
    missing = [p for p in ("data.npy", "episodes") if not (path / p).exists()]
    if missing:
        raise FileNotFoundError(
            f"data_dir {str(path)!r} is not a Housekeep data directory (missing "
            f"{', '.join(missing)}); point data_dir at a copy of the Housekeep data (data.npy, "
            f"splits.yaml, episodes/<split>/<Scene>.json.gz): {missing_hint('housekeep')}"
        )
    return path.resolve()


def available_scenes(data_dir: str | Path, split: str | None = None) -> dict[str, str]:
    """{scene: split} for every episode file present (optionally of one split)."""
    root = check_data_dir(data_dir) / "episodes"
    found: dict[str, str] = {}
    for split_dir in sorted(root.iterdir()):
        if split_dir.is_dir() and (split is None or split_dir.name == split):
            for file in sorted(split_dir.glob("*.json.gz")):
                found[file.name.removesuffix(".json.gz")] = split_dir.name
    return found


def split_scenes(data_dir: str | Path, split: str) -> list[str]:
    """The scenes of `split` whose episode files are present."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    scenes = sorted(available_scenes(data_dir, split))
    if not scenes:
        raise ValueError(f"no episode files for split {split!r} under {data_dir}/episodes/{split}")
    return scenes


def scene_split(data_dir: str | Path, scene: str) -> str:
    scenes = available_scenes(data_dir)
    if scene not in scenes:
        raise ValueError(f"scene {scene!r} not found; scenes in {data_dir}: {', '.join(scenes)}")
    return scenes[scene]


@lru_cache(maxsize=8)
def _episodes(path: str) -> tuple[dict[str, Any], ...]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return tuple(json.load(handle)["episodes"])


def load_episodes(data_dir: str | Path, scene: str) -> tuple[dict[str, Any], ...]:
    """The raw episodes of one scene (cached; do not modify them)."""
    split = scene_split(data_dir, scene)
    return _episodes(str(check_data_dir(data_dir) / "episodes" / split / f"{scene}.json.gz"))


@lru_cache(maxsize=4)
def _annotations(path: str) -> tuple[dict[str, int], dict[str, int], np.ndarray]:
    data = load_npy(path).item()  # restricted unpickler: data_dir may name any file
    pairs = {str(name): i for i, name in enumerate(data["room_receptacles"])}
    objects = {str(name): i for i, name in enumerate(data["objects"])}
    positive = (np.asarray(data["ranks"]) > 0).mean(axis=-1)  # [pairs, objects]
    return pairs, objects, positive


def annotations(data_dir: str | Path) -> tuple[dict[str, int], dict[str, int], np.ndarray]:
    """(room|receptacle index, object index, fraction of annotators ranking it positively)."""
    return _annotations(str(check_data_dir(data_dir) / "data.npy"))


def room_type(room: str) -> str:
    """`bedroom_1` -> `bedroom` (the annotation key's room part)."""
    return re.sub(r"_\d+$", "", room)


def house_from_episode(
    episode: dict[str, Any],
    annotation_tables: tuple[dict[str, int], dict[str, int], np.ndarray],
    source: str = "",
) -> House:
    """Build a `House` from one raw Housekeep episode."""
    pair_index, object_index, positive = annotation_tables
    start = np.asarray(episode["start_matrix"], dtype=float)
    end = np.asarray(episode["end_matrix"], dtype=float) > 0
    keys, categories = episode["recs_keys"], episode["recs_cats"]
    rooms_of = [key.split("-", 1)[0] for key in keys]
    # Receptacles outside every room (room "None") are kept only when an object uses them.
    used = (start > 0).any(axis=1) | end.any(axis=1)
    kept = [i for i, room in enumerate(rooms_of) if room != "None" or used[i]]
    kept.sort(key=lambda i: rooms_of[i])  # number receptacles room by room (stable within)

    object_names = [sanitize_name(key) for key in episode["objs_keys"]]
    room_names = {
        i: (OUTSIDE_ROOM if rooms_of[i] == "None" else sanitize_name(rooms_of[i])) for i in kept
    }
    rooms = sorted(set(room_names.values()))
    taken = set(object_names) | set(rooms)
    receptacle_names = unique_names([sanitize_name(categories[i]) for i in kept], taken)
    nav = episode["nav_recs_pos"]
    receptacles = [
        Receptacle(
            name=name,
            category=sanitize_name(categories[i]),
            room=room_names[i],
            position=(float(nav[i][0]), float(nav[i][2])),
        )
        for name, i in zip(receptacle_names, kept, strict=True)
    ]
    objects = [
        HouseObject(name=name, category=sanitize_name(category))
        for name, category in zip(object_names, episode["objs_cats"], strict=True)
    ]
    row_of = {original: row for row, original in enumerate(kept)}
    start_rows = [row_of[int(np.argmax(start[:, o]))] for o in range(len(objects))]

    soft = np.zeros((len(kept), len(objects)))
    for row, i in enumerate(kept):
        pair = pair_index.get(f"{room_type(rooms_of[i])}|{categories[i]}")
        if pair is None:
            continue
        for o, category in enumerate(episode["objs_cats"]):
            if category in object_index:
                soft[row, o] = positive[pair, object_index[category]]
    position = episode["start_position"]
    return House(
        rooms=rooms,
        receptacles=receptacles,
        objects=objects,
        start=start_rows,
        allowed=end[kept],
        soft=soft,
        start_position=(float(position[0]), float(position[2])),
        source=source,
    )


def load_house(data_dir: str | Path, scene: str, episode: int) -> House:
    """The house of episode number `episode` (index in the scene's file) of `scene`."""
    episodes = load_episodes(data_dir, scene)
    if not 0 <= episode < len(episodes):
        raise ValueError(
            f"episode must be in [0, {len(episodes)}) for scene {scene!r}, got {episode}"
        )
    split = scene_split(data_dir, scene)
    return house_from_episode(
        episodes[episode], annotations(data_dir), source=f"{split}/{scene}#{episode}"
    )
