"""Helpers of the Housekeep env and LLM-Personalize tests: a tiny hand-built house and the
real data directory."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from llmrl.common.datasets import dataset_dir, missing_hint
from llmrl.simulator.envs.housekeep import House, HouseObject, Receptacle

# the reason a test that needs the real data skips where there is none
NO_REAL_DATA = f"needs the Housekeep benchmark data: {missing_hint('housekeep')}"


def real_data_dir() -> Path | None:
    """The real Housekeep data where `dataset_dir` finds it (the variable, else `llmrl data
    get housekeep`'s copy), when it holds the annotations."""
    found = dataset_dir("housekeep")
    return found if found and (found / "data.npy").exists() else None


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
