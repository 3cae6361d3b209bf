"""Procedurally generated houses, for use without the Housekeep data (tests, demos, RL).

The correctness table is a small hand-written common-sense table (which receptacles of
which rooms suit an object), not the Housekeep annotations. Simulated annotators rate each
(room|receptacle, object) pair: suitable pairs get 6-10 positive votes out of 10 (so they
are correct by the benchmark's >= 6 rule), the others 0-3.
"""

from __future__ import annotations

import numpy as np

from .house import House, HouseObject, Receptacle, unique_names

ANNOTATORS = 10

ROOM_RECEPTACLES: dict[str, tuple[str, ...]] = {
    "kitchen": ("counter", "fridge", "sink", "top_cabinet", "bottom_cabinet", "table", "oven"),
    "living_room": ("sofa", "coffee_table", "shelf", "carpet", "tv_stand", "armchair"),
    "bedroom": ("bed", "nightstand", "wardrobe", "desk", "chest", "carpet"),
    "bathroom": ("sink", "bathtub", "toilet", "shelf", "counter", "cabinet"),
    "dining_room": ("table", "chair", "sideboard", "shelf"),
    "home_office": ("desk", "office_chair", "shelf", "bottom_cabinet"),
    "corridor": ("console_table", "shoe_rack", "carpet", "chest"),
    "laundry_room": ("washer", "dryer", "shelf", "basket"),
}
ESSENTIAL_ROOMS = ("kitchen", "living_room", "bedroom", "bathroom")

# Object category -> the (room type, receptacle category) pairs people would put it on.
OBJECT_HOMES: dict[str, tuple[tuple[str, str], ...]] = {
    "mug": (("kitchen", "top_cabinet"), ("kitchen", "counter"), ("dining_room", "sideboard")),
    "plate": (("kitchen", "top_cabinet"), ("dining_room", "sideboard"), ("kitchen", "sink")),
    "apple": (("kitchen", "fridge"), ("kitchen", "counter"), ("dining_room", "table")),
    "milk_carton": (("kitchen", "fridge"),),
    "frying_pan": (("kitchen", "bottom_cabinet"), ("kitchen", "oven")),
    "cutting_board": (("kitchen", "counter"), ("kitchen", "bottom_cabinet")),
    "toothbrush": (("bathroom", "sink"), ("bathroom", "counter"), ("bathroom", "cabinet")),
    "shampoo": (("bathroom", "bathtub"), ("bathroom", "shelf"), ("bathroom", "cabinet")),
    "towel": (("bathroom", "shelf"), ("bathroom", "cabinet"), ("laundry_room", "basket")),
    "soap": (("bathroom", "sink"), ("bathroom", "bathtub"), ("bathroom", "counter")),
    "pillow": (("bedroom", "bed"), ("living_room", "sofa"), ("living_room", "armchair")),
    "alarm_clock": (("bedroom", "nightstand"), ("bedroom", "desk")),
    "sweater": (("bedroom", "wardrobe"), ("bedroom", "chest"), ("laundry_room", "basket")),
    "slippers": (("bedroom", "carpet"), ("corridor", "shoe_rack")),
    "book": (("living_room", "shelf"), ("bedroom", "nightstand"), ("home_office", "shelf")),
    "remote_control": (("living_room", "coffee_table"), ("living_room", "tv_stand")),
    "board_game": (("living_room", "shelf"), ("living_room", "coffee_table")),
    "vase": (("living_room", "shelf"), ("dining_room", "table"), ("dining_room", "sideboard")),
    "laptop": (("home_office", "desk"), ("bedroom", "desk")),
    "stapler": (("home_office", "desk"), ("home_office", "bottom_cabinet")),
    "folder": (("home_office", "shelf"), ("home_office", "bottom_cabinet"), ("bedroom", "desk")),
    "keys": (("corridor", "console_table"), ("corridor", "chest")),
    "umbrella": (("corridor", "shoe_rack"), ("corridor", "chest")),
    "sneakers": (("corridor", "shoe_rack"),),
    "detergent": (("laundry_room", "shelf"), ("laundry_room", "washer")),
    "napkins": (("dining_room", "sideboard"), ("dining_room", "table"), ("kitchen", "counter")),
    "candle": (("dining_room", "table"), ("living_room", "coffee_table"), ("bathroom", "shelf")),
}

ROOM_SIZE = 5.0  # metres; rooms sit on a grid of ROOM_SIZE cells


def generate_house(
    seed: int,
    rooms: tuple[int, int] = (4, 6),
    receptacles_per_room: tuple[int, int] = (2, 5),
    objects: tuple[int, int] = (5, 8),
    misplaced: tuple[int, int] = (2, 4),
) -> House:
    """A random plausible house; the same seed gives the same house. Ranges are inclusive."""
    rng = np.random.default_rng(seed)
    room_count = int(rng.integers(rooms[0], rooms[1] + 1))
    extra = [t for t in ROOM_RECEPTACLES if t not in ESSENTIAL_ROOMS]
    optional = list(
        rng.choice(extra, size=max(0, room_count - len(ESSENTIAL_ROOMS)), replace=False)
    )
    room_types = [*ESSENTIAL_ROOMS[:room_count], *map(str, optional)]
    room_names = unique_names(room_types, set(), start=0)

    cells = rng.permutation(9)[: len(room_names)]  # a 3x3 grid of room positions
    receptacle_specs: list[tuple[str, str, str, tuple[float, float]]] = []  # cat, room, type, pos
    for room, kind, cell in zip(room_names, room_types, cells, strict=True):
        choices = ROOM_RECEPTACLES[kind]
        count = int(rng.integers(receptacles_per_room[0], receptacles_per_room[1] + 1))
        origin = ((cell % 3) * ROOM_SIZE, (cell // 3) * ROOM_SIZE)
        for category in rng.choice(choices, size=min(count, len(choices)), replace=False):
            offset = rng.uniform(0.5, ROOM_SIZE - 0.5, size=2)
            position = (float(origin[0] + offset[0]), float(origin[1] + offset[1]))
            receptacle_specs.append((str(category), room, kind, position))

    pairs = {(kind, category) for category, _, kind, _ in receptacle_specs}
    candidates = sorted(c for c, homes in OBJECT_HOMES.items() if pairs & set(homes))
    object_count = min(int(rng.integers(objects[0], objects[1] + 1)), len(candidates))
    object_categories = [str(c) for c in rng.choice(candidates, size=object_count, replace=False)]
    object_names = unique_names(object_categories, set(room_names))
    receptacle_names = unique_names(
        [spec[0] for spec in receptacle_specs], set(room_names) | set(object_names)
    )

    positive_votes = np.zeros((len(receptacle_specs), object_count), dtype=int)
    for r, (category, _, kind, _) in enumerate(receptacle_specs):
        for o, object_category in enumerate(object_categories):
            suitable = (kind, category) in OBJECT_HOMES[object_category]
            positive_votes[r, o] = rng.integers(6, 11) if suitable else rng.integers(0, 4)
    soft = positive_votes / ANNOTATORS
    allowed = positive_votes >= 6

    misplaced_count = min(int(rng.integers(misplaced[0], misplaced[1] + 1)), object_count)
    misplaced_objects = set(rng.choice(object_count, size=misplaced_count, replace=False).tolist())
    start = []
    for o in range(object_count):
        pool = np.flatnonzero(~allowed[:, o] if o in misplaced_objects else allowed[:, o])
        start.append(int(rng.choice(pool if pool.size else np.arange(len(receptacle_specs)))))

    return House(
        rooms=room_names,
        receptacles=[
            Receptacle(name=name, category=category, room=room, position=position)
            for name, (category, room, _, position) in zip(
                receptacle_names, receptacle_specs, strict=True
            )
        ],
        objects=[
            HouseObject(name=n, category=c)
            for n, c in zip(object_names, object_categories, strict=True)
        ],
        start=start,
        allowed=allowed,
        soft=soft,
        start_position=(-1.0, -1.0),
        source=f"procedural#{seed}",
    )
