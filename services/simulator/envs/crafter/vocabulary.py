"""Crafter's names and ELLM's goal vocabulary, without importing crafter.

The names mirror crafter 1.8.3's `data.yaml` (tests check that they still do): the 17 actions,
the 16 inventory entries (the four vital statistics first), the 22 achievements, and the
semantic ids of `local_map` (0 is "outside the world", 1-12 materials, 13-18 creatures and
objects).

Goals are ELLM's verb-noun phrases ("chop tree", "place crafting table"), the vocabulary in which
transition captions say what an action achieved and suggesters propose what to do next. Some
goals have two phrasings (ELLM counts "eat cow" and "attack cow" as one goal, and "make
crafting table" and "place crafting table"): `canonical_goal` maps each to one, and `GOALS`
lists the canonical goals only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ACTION_NAMES: tuple[str, ...] = (
    "noop",
    "move_left",
    "move_right",
    "move_up",
    "move_down",
    "do",
    "sleep",
    "place_stone",
    "place_table",
    "place_furnace",
    "place_plant",
    "make_wood_pickaxe",
    "make_stone_pickaxe",
    "make_iron_pickaxe",
    "make_wood_sword",
    "make_stone_sword",
    "make_iron_sword",
)
INVENTORY_ITEMS: tuple[str, ...] = (
    "health",
    "food",
    "drink",
    "energy",
    "sapling",
    "wood",
    "stone",
    "coal",
    "iron",
    "diamond",
    "wood_pickaxe",
    "stone_pickaxe",
    "iron_pickaxe",
    "wood_sword",
    "stone_sword",
    "iron_sword",
)
VITALS: tuple[str, ...] = INVENTORY_ITEMS[:4]
INVENTORY_MAX = 9  # every inventory entry is clamped to [0, 9] by crafter
ACHIEVEMENTS: tuple[str, ...] = (
    "collect_coal",
    "collect_diamond",
    "collect_drink",
    "collect_iron",
    "collect_sapling",
    "collect_stone",
    "collect_wood",
    "defeat_skeleton",
    "defeat_zombie",
    "eat_cow",
    "eat_plant",
    "make_iron_pickaxe",
    "make_iron_sword",
    "make_stone_pickaxe",
    "make_stone_sword",
    "make_wood_pickaxe",
    "make_wood_sword",
    "place_furnace",
    "place_plant",
    "place_stone",
    "place_table",
    "wake_up",
)
# Semantic ids as crafter's SemanticView numbers them: None (outside the world), the
# materials in data.yaml's order, then the object classes the env passes to SemanticView.
SEMANTIC_NAMES: tuple[str, ...] = (
    "none",
    "water",
    "grass",
    "stone",
    "path",
    "sand",
    "tree",
    "lava",
    "coal",
    "iron",
    "diamond",
    "table",
    "furnace",
    "player",
    "cow",
    "zombie",
    "skeleton",
    "arrow",
    "plant",
)
SEMANTIC_IDS: dict[str, int] = {name: i for i, name in enumerate(SEMANTIC_NAMES)}
CREATURES: tuple[str, ...] = ("cow", "zombie", "skeleton")

# What each achievement is called when an action achieves it (ELLM's verb-noun phrases).
ACHIEVEMENT_PHRASES: dict[str, str] = {
    "collect_coal": "mine coal",
    "collect_diamond": "mine diamond",
    "collect_drink": "drink water",
    "collect_iron": "mine iron",
    "collect_sapling": "chop grass",
    "collect_stone": "mine stone",
    "collect_wood": "chop tree",
    "defeat_skeleton": "attack skeleton",
    "defeat_zombie": "attack zombie",
    "eat_cow": "attack cow",
    "eat_plant": "eat plant",
    "make_iron_pickaxe": "make iron pickaxe",
    "make_iron_sword": "make iron sword",
    "make_stone_pickaxe": "make stone pickaxe",
    "make_stone_sword": "make stone sword",
    "make_wood_pickaxe": "make wood pickaxe",
    "make_wood_sword": "make wood sword",
    "place_furnace": "place furnace",
    "place_plant": "place plant",
    "place_stone": "place stone",
    "place_table": "place crafting table",
    "wake_up": "wake up",
}

# Phrasings of one goal: each maps to the canonical phrase (ELLM's equivalences).
EQUIVALENT_GOALS: dict[str, str] = {
    "eat cow": "attack cow",
    "make crafting table": "place crafting table",
}

# The verbs ELLM's prompt lists as valid.
VERBS: tuple[str, ...] = ("sleep", "eat", "attack", "chop", "drink", "place", "make", "mine")


@dataclass(frozen=True)
class Prerequisites:
    """What a goal needs (crafter 1.8.3's rules): `inventory` item -> least count, `in_view`
    things that must be in the local view: something to act on, or the crafting table (and
    furnace) that making a tool needs nearby (crafter: within one cell; the view is ELLM's
    proxy for it). Where to place something (grass, sand, path) is not checked."""

    inventory: dict[str, int] = field(default_factory=dict)
    in_view: tuple[str, ...] = ()


# ELLM's goals (canonical phrasings) and their prerequisites, in the order prompts and the
# all-goals suggester list them. "wake up" is an achievement but no goal: it follows sleep.
GOAL_PREREQUISITES: dict[str, Prerequisites] = {
    "chop tree": Prerequisites(in_view=("tree",)),
    "chop grass": Prerequisites(in_view=("grass",)),
    "drink water": Prerequisites(in_view=("water",)),
    "eat plant": Prerequisites(in_view=("plant",)),
    "attack cow": Prerequisites(in_view=("cow",)),
    "attack zombie": Prerequisites(in_view=("zombie",)),
    "attack skeleton": Prerequisites(in_view=("skeleton",)),
    "sleep": Prerequisites(),
    "place plant": Prerequisites(inventory={"sapling": 1}),
    "place crafting table": Prerequisites(inventory={"wood": 2}),
    "make wood pickaxe": Prerequisites(inventory={"wood": 1}, in_view=("table",)),
    "make wood sword": Prerequisites(inventory={"wood": 1}, in_view=("table",)),
    "mine stone": Prerequisites(inventory={"wood_pickaxe": 1}, in_view=("stone",)),
    "mine coal": Prerequisites(inventory={"wood_pickaxe": 1}, in_view=("coal",)),
    "place stone": Prerequisites(inventory={"stone": 1}),
    "make stone pickaxe": Prerequisites(inventory={"wood": 1, "stone": 1}, in_view=("table",)),
    "make stone sword": Prerequisites(inventory={"wood": 1, "stone": 1}, in_view=("table",)),
    "place furnace": Prerequisites(inventory={"stone": 4}),
    "mine iron": Prerequisites(inventory={"stone_pickaxe": 1}, in_view=("iron",)),
    "make iron pickaxe": Prerequisites(
        inventory={"wood": 1, "coal": 1, "iron": 1}, in_view=("table", "furnace")
    ),
    "make iron sword": Prerequisites(
        inventory={"wood": 1, "coal": 1, "iron": 1}, in_view=("table", "furnace")
    ),
    "mine diamond": Prerequisites(inventory={"iron_pickaxe": 1}, in_view=("diamond",)),
}
GOALS: tuple[str, ...] = tuple(GOAL_PREREQUISITES)


def canonical_goal(phrase: str) -> str:
    """The canonical phrasing of a goal ("eat cow" -> "attack cow"); other text is returned
    lower-cased, with single spaces and without a trailing full stop."""
    text = " ".join(phrase.lower().strip().rstrip(".").split())
    return EQUIVALENT_GOALS.get(text, text)
