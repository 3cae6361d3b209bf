"""CrafterText: Crafter (Hafner 2021) with ELLM's text captions, for LLM-suggested exploration.

Wraps `crafter.Env` (crafter 1.8.3, old gym API: `reset() -> obs`, `step() -> 4-tuple`) as a
gymnasium env; crafter is imported only when an env is built (`pip install 'llmrl[crafter]'`;
numba makes its world generation ~15x faster).

Actions: `Discrete(17)`, crafter's own (`ACTION_NAMES`: noop, move_left, move_right, move_up,
move_down, do, sleep, place_stone, place_table, place_furnace, place_plant, make_wood_pickaxe,
make_stone_pickaxe, make_iron_pickaxe, make_wood_sword, make_stone_sword, make_iron_sword).

Observations:
  caption             the state in ELLM's words (grammar: `captions.py`), e.g. "you see grass,
                      tree, and water. you are targeting tree. you have in your inventory
                      wood. you feel thirsty."
  transition_caption  what the last action achieved ("chop tree", "place crafting table",
                      "drink water", "attack cow"...), "" when nothing (and after reset)
  text                the caption again (every text env of llmrl has a `text` entry)
  local_map           int32 (9, 7): semantic ids (`vocabulary.SEMANTIC_NAMES`) of the local
                      view, indexed [x, y] as crafter's maps are; the player is at [4, 3]
                      (cells outside the world are 0)
  inventory           int32 (16,): crafter's inventory order, `vocabulary.INVENTORY_ITEMS`
                      (health, food, drink, energy, then the items), each in [0, 9]
  achievements        int32 (22,): 1 for each achievement unlocked this episode
                      (`vocabulary.ACHIEVEMENTS`, crafter's order)
  pixels              uint8 (64, 64, 3), crafter's image, only with `pixels=True` (rendering
                      costs about half the step time)

Reward and episode end are crafter's own: +1 the first time each achievement is unlocked in an
episode, +-0.1 per point of health gained or lost (`reward=False`: always 0); the episode
terminates when the player dies and is truncated after `length` steps.

Settings (each checked, the error names it): `length` (10000; 1 to 1,000,000 steps), `area`
(64; the world's side, 16 to 256 cells), `reward` (True), `pixels` (False), `status_threshold`
(9; a vital statistic below it is felt: "you feel thirsty", 1 to 10). Seeding is per reset
(a world's `seed`): a seeded reset regenerates the world from that seed, later resets continue
from it, so episodes are reproducible (crafter's spawning and despawning of creatures runs over
each chunk's objects in the order of their positions, not of their memory addresses).
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from llmrl.common.registry import registry

from ..text_spaces import text_space
from .captions import state_caption, transition_caption
from .vocabulary import (
    ACHIEVEMENTS,
    ACTION_NAMES,
    CREATURES,
    INVENTORY_ITEMS,
    INVENTORY_MAX,
    SEMANTIC_NAMES,
)

LOCAL_VIEW = (9, 7)  # crafter's 9x9 view less its two rows of inventory
PIXELS = 64
DEFAULTS: dict[str, Any] = {
    "length": 10_000,
    "area": 64,
    "reward": True,
    "pixels": False,
    "status_threshold": 9,
}
BOUNDS = {"length": (1, 1_000_000), "area": (16, 256), "status_threshold": (1, 10)}


@functools.cache
def crafter_env_class() -> type:
    """crafter.Env that renders its image only when asked to (rendering is the costly part of
    a step, and most learners read the semantic map and captions instead)."""
    import crafter

    class QuietCrafter(crafter.Env):  # type: ignore[misc, name-defined]
        render_pixels = True

        def _obs(self) -> np.ndarray | None:
            return self.render() if self.render_pixels else None

        def _balance_chunk(self, chunk: Any, objs: Any) -> None:
            # crafter keeps each chunk's objects in a set, ordered by the objects' hashes
            # (their memory addresses), and despawns `creatures[random.randint(n)]` from it:
            # which creature goes would differ between two runs of the same seed. Balancing
            # in the order of the objects' positions (one object a cell) makes it seeded.
            super()._balance_chunk(chunk, sorted(objs, key=_position))

    return QuietCrafter


def _position(obj: Any) -> tuple[int, int]:
    return int(obj.pos[0]), int(obj.pos[1])


def _check_setting(name: str, value: Any) -> None:
    if name in BOUNDS:
        low, high = BOUNDS[name]
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ValueError(f"{name}: expected an integer in [{low}, {high}], got {value!r}")
        if not low <= value <= high:
            raise ValueError(f"{name}: expected an integer in [{low}, {high}], got {value}")
    elif not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name}: expected true or false, got {value!r}")


@registry.register_env(
    "CrafterText",
    description="Crafter with ELLM's captions of states and transitions (22 achievements)",
    kwargs=DEFAULTS,
    requires=("crafter",),
    extra="crafter",
    tags=("crafter", "text", "ellm"),
)
class CrafterTextEnv(gym.Env):
    """Crafter with state and transition captions in ELLM's words (see module docstring)."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's convention
    action_names: tuple[str, ...] = ACTION_NAMES

    def __init__(
        self,
        length: int = 10_000,
        area: int = 64,
        reward: bool = True,
        pixels: bool = False,
        status_threshold: int = 9,
    ) -> None:
        settings = {
            "length": length,
            "area": area,
            "reward": reward,
            "pixels": pixels,
            "status_threshold": status_threshold,
        }
        for name, value in settings.items():
            _check_setting(name, value)
        self.length = int(length)
        self.status_threshold = int(status_threshold)
        self.pixels = bool(pixels)
        self.crafter = crafter_env_class()(
            area=(int(area), int(area)), length=self.length, reward=bool(reward)
        )
        self.crafter.render_pixels = self.pixels
        entries: dict[str, spaces.Space] = {
            "caption": text_space(400),
            "transition_caption": text_space(200),
            "text": text_space(400),
            "local_map": spaces.Box(0, len(SEMANTIC_NAMES) - 1, LOCAL_VIEW, np.int32),
            "inventory": spaces.Box(0, INVENTORY_MAX, (len(INVENTORY_ITEMS),), np.int32),
            "achievements": spaces.Box(0, 1, (len(ACHIEVEMENTS),), np.int32),
        }
        if self.pixels:
            entries["pixels"] = spaces.Box(0, 255, (PIXELS, PIXELS, 3), np.uint8)
        self.observation_space = spaces.Dict(entries)
        self.action_space = spaces.Discrete(len(ACTION_NAMES))

    # -- what the player sees ---------------------------------------------------------------
    @property
    def player(self) -> Any:
        return self.crafter._player

    @property
    def world(self) -> Any:
        return self.crafter._world

    def local_map(self, semantic: np.ndarray | None = None) -> np.ndarray:
        """The semantic ids of the local view around the player, indexed [x, y], cropped from
        `semantic` (the whole world's map, as crafter's step info has it) or a fresh one."""
        if semantic is None:
            semantic = self.crafter._sem_view()
        (width, height), (x, y) = LOCAL_VIEW, self.player.pos
        left, top = x - width // 2, y - height // 2
        out = np.zeros(LOCAL_VIEW, np.int32)
        x0, y0 = max(left, 0), max(top, 0)
        x1 = min(left + width, semantic.shape[0])
        y1 = min(top + height, semantic.shape[1])
        if x0 < x1 and y0 < y1:
            out[x0 - left : x1 - left, y0 - top : y1 - top] = semantic[x0:x1, y0:y1]
        return out

    def target(self) -> tuple[str | None, Any]:
        """The name of what is on the faced cell (creature or object first, then material;
        None outside the world) and the object itself (None when there is none)."""
        facing = (
            self.player.pos[0] + self.player.facing[0],
            self.player.pos[1] + self.player.facing[1],
        )
        material, obj = self.world[facing]
        if obj is not None:
            return type(obj).__name__.lower(), obj
        return material, None

    def inventory(self) -> dict[str, int]:
        return {item: int(self.player.inventory[item]) for item in INVENTORY_ITEMS}

    def caption(self, local_map: np.ndarray | None = None) -> str:
        return state_caption(
            self.local_map() if local_map is None else local_map,
            self.target()[0],
            self.inventory(),
            self.status_threshold,
            bool(self.player.sleeping),
        )

    def _observe(
        self, pixels: np.ndarray | None, transition: str, semantic: np.ndarray | None = None
    ) -> dict[str, Any]:
        local_map = self.local_map(semantic)
        caption = self.caption(local_map)
        achievements = self.player.achievements
        obs: dict[str, Any] = {
            "caption": caption,
            "transition_caption": transition,
            "text": caption,
            "local_map": local_map,
            "inventory": np.fromiter(
                (self.player.inventory[item] for item in INVENTORY_ITEMS), np.int32
            ),
            "achievements": np.fromiter(
                (achievements[name] > 0 for name in ACHIEVEMENTS), np.int32
            ),
        }
        if self.pixels:
            obs["pixels"] = pixels
        return obs

    # -- gymnasium API ----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:  # crafter draws episode e's world from hash((seed, e))
            self.crafter._seed = int(seed)
            self.crafter._episode = 0
        pixels = self.crafter.reset()
        return self._observe(pixels, ""), {}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if isinstance(action, bool) or not isinstance(action, int | np.integer):
            raise ValueError(f"action: expected an integer in [0, {len(ACTION_NAMES) - 1}], "
                             f"got {action!r}")  # fmt: skip
        if not 0 <= action < len(ACTION_NAMES):
            raise ValueError(f"action: expected an integer in [0, {len(ACTION_NAMES) - 1}], "
                             f"got {action}")  # fmt: skip
        if self.player is None:
            raise RuntimeError("call reset() before step()")
        before = dict(self.player.achievements)
        was_sleeping = bool(self.player.sleeping)
        name, obj = self.target()
        creature_health = obj.health if name in CREATURES else None
        pixels, reward, done, info = self.crafter.step(int(action))
        after = self.player.achievements
        achieved = [key for key in ACHIEVEMENTS if after[key] > before[key]]
        hit = None
        if creature_health is not None and ACTION_NAMES[action] == "do":
            hit = name if obj.health < creature_health else None  # asleep: no hit
        fell_asleep = self.player.sleeping and not was_sleeping
        transition = transition_caption(achieved, hit, fell_asleep)
        dead = info["discount"] == 0
        info["transition_caption"] = transition
        obs = self._observe(pixels, transition, info["semantic"])
        return obs, float(reward), bool(dead), bool(done and not dead), info
