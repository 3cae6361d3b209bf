"""A tiny stand-in for `CrafterText` with the same observation keys, for the ELLM tests.

`TinyCrafterText`: a strip of 7 cells, water at the left end, a tree at the right end, the
player starting in the middle. Actions: 0 noop, 1 left, 2 right, 3 do (drink the water or
chop the tree beside the player, on the side it faces), 4 place a crafting table (needs
wood, once). Each newly unlocked achievement pays 1, as crafter's own reward does; an
episode is cut after `length` steps. Observations, as CrafterText's: `caption`,
`transition_caption` ("chop tree", "drink water", "place crafting table" or ""),
`local_map` (crafter's semantic ids of the strip), `inventory` (crafter's 16 entries) and
`achievements` (22 binary entries in crafter's order). Tests import it
(`import support.tiny_crafter_text`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from llmrl.common.registry import registry
from llmrl.simulator.envs.crafter.vocabulary import ACHIEVEMENTS, INVENTORY_ITEMS, SEMANTIC_IDS
from llmrl.simulator.envs.text_spaces import text_space

ENV_ID = "TinyCrafterText"
GRASS, WATER, TREE, PLAYER, TABLE = (
    SEMANTIC_IDS[name] for name in ("grass", "water", "tree", "player", "table")
)
NAMES = {GRASS: "grass", WATER: "water", TREE: "tree", TABLE: "table"}
WIDTH = 7
NOOP, LEFT, RIGHT, DO, PLACE_TABLE = range(5)


@registry.register_env(ENV_ID, max_episode_steps=20, tags=("test",))
class TinyCrafterText(gym.Env):
    """Chop the tree, drink the water, place a table (ELLM's tests)."""

    def __init__(self, length: int = 20) -> None:
        self.length = length
        self.observation_space = spaces.Dict(
            {
                "caption": text_space(256),
                "transition_caption": text_space(64),
                "local_map": spaces.Box(0, 18, (1, WIDTH), np.int64),
                "inventory": spaces.Box(0, 9, (len(INVENTORY_ITEMS),), np.int64),
                "achievements": spaces.Box(0, 1, (len(ACHIEVEMENTS),), np.int64),
            }
        )
        self.action_space = spaces.Discrete(5)
        self._reset_state()

    def _reset_state(self) -> None:
        self.cells = [WATER] + [GRASS] * (WIDTH - 2) + [TREE]
        self.position, self.facing = WIDTH // 2, 1
        self.wood, self.drink = 0, 0
        self.unlocked: set[str] = set()
        self.t = 0

    def _caption(self) -> str:
        seen = sorted({NAMES[c] for c in self.cells})
        caption = f"you see {', '.join(seen)}."
        if self.wood:
            caption += " you have in your inventory wood."
        if self.drink == 0:
            caption += " you feel thirsty."
        return caption

    def _observe(self, transition: str = "") -> dict[str, Any]:
        view = np.array([self.cells], dtype=np.int64)
        view[0, self.position] = PLAYER
        achievements = np.array([name in self.unlocked for name in ACHIEVEMENTS], np.int64)
        return {
            "caption": self._caption(),
            "transition_caption": transition,
            "local_map": view,
            "inventory": self._inventory(),
            "achievements": achievements,
        }

    def _inventory(self) -> np.ndarray:
        inventory = np.zeros(len(INVENTORY_ITEMS), np.int64)
        inventory[:4] = 9  # healthy, fed, rested
        inventory[INVENTORY_ITEMS.index("drink")] = 9 if self.drink else 5
        inventory[INVENTORY_ITEMS.index("wood")] = min(self.wood, 9)
        return inventory

    def reset(self, *, seed: int | None = None, options: Any = None):
        super().reset(seed=seed)
        self._reset_state()
        return self._observe(), {}

    def step(self, action: int):
        self.t += 1
        action, transition, unlocked = int(action), "", None
        if action in (LEFT, RIGHT):
            self.facing = -1 if action == LEFT else 1
            target = self.position + self.facing
            if 0 <= target < WIDTH and self.cells[target] in (GRASS,):
                self.position = target
        elif action == DO:
            target = self.position + self.facing
            cell = self.cells[target] if 0 <= target < WIDTH else None
            if cell == TREE:
                self.wood += 1
                transition, unlocked = "chop tree", "collect_wood"
            elif cell == WATER:
                self.drink += 1
                transition, unlocked = "drink water", "collect_drink"
        elif action == PLACE_TABLE and self.wood > 0 and TABLE not in self.cells:
            target = self.position - self.facing
            if 0 <= target < WIDTH and self.cells[target] == GRASS:
                self.cells[target] = TABLE
                self.wood -= 1
                transition, unlocked = "place crafting table", "place_table"
        reward = 0.0
        if unlocked is not None and unlocked not in self.unlocked:
            self.unlocked.add(unlocked)
            reward = 1.0
        truncated = self.t >= self.length
        return self._observe(transition), reward, False, truncated, {}
