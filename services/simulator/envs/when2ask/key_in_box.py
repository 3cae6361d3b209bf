"""KeyInBox: the door's key is hidden in a box; toggling the box reveals it."""

from __future__ import annotations

from minigrid.core.constants import COLOR_NAMES
from minigrid.core.world_object import Box, Key, WorldObj

from llmrl.common.registry import registry

from .env import When2AskEnv
from .simple_door_key import DEFAULTS


@registry.register_env(
    "KeyInBox", max_episode_steps=100, kwargs=DEFAULTS, tags=("minigrid", "when2ask")
)
class KeyInBoxEnv(When2AskEnv):
    """When2Ask KeyInBox: open the box, take the key, unlock the door, reach the goal."""

    def task_objects(self, door_color: str) -> list[WorldObj]:
        return [Box(self._rand_elem(COLOR_NAMES), contains=Key(door_color))]
