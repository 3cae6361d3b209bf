"""Helpers of the Housekeep env and LLM-Personalize tests: a tiny hand-built house and the
real data directory."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from llmrl.simulator.envs.housekeep import House, HouseObject, Receptacle
from llmrl.simulator.envs.housekeep.data import DATA_ENV_VAR

REPO = Path(__file__).resolve().parents[2]


def real_data_dir() -> Path | None:
    """$LLMRL_HOUSEKEEP_DATA, else ../shared/data/housekeep beside the repository."""
    candidates = [os.environ.get(DATA_ENV_VAR), REPO.parent / "shared" / "data" / "housekeep"]
    for candidate in candidates:
        if candidate and (Path(candidate) / "data.npy").exists():
            return Path(candidate)
    return None


def tiny_house() -> House:
    """Two rooms, four receptacles, three objects; two objects misplaced at the start.

    kitchen_0: counter_1 at (0, 0), fridge_1 at (3, 4); bedroom_0: bed_1 (10, 0), shelf_1 (10, 2).
    mug_1 starts on bed_1 (wrong; right: counter_1), book_1 on counter_1 (wrong; right: shelf_1
    or bed_1), apple_1 on fridge_1 (right).
    """
    receptacles = [
        Receptacle("counter_1", "counter", "kitchen_0", (0.0, 0.0)),
        Receptacle("fridge_1", "fridge", "kitchen_0", (3.0, 4.0)),
        Receptacle("bed_1", "bed", "bedroom_0", (10.0, 0.0)),
        Receptacle("shelf_1", "shelf", "bedroom_0", (10.0, 2.0)),
    ]
    objects = [
        HouseObject("mug_1", "mug"),
        HouseObject("book_1", "book"),
        HouseObject("apple_1", "apple"),
    ]
    # rows: counter, fridge, bed, shelf; columns: mug, book, apple (fraction of annotators)
    soft = np.array(
        [
            [0.9, 0.2, 0.7],
            [0.1, 0.0, 1.0],
            [0.0, 0.6, 0.0],
            [0.3, 0.8, 0.1],
        ]
    )
    return House(
        rooms=["kitchen_0", "bedroom_0"],
        receptacles=receptacles,
        objects=objects,
        start=[2, 0, 1],
        allowed=soft >= 0.6,
        soft=soft,
        start_position=(0.0, -5.0),
        source="tiny",
    )
