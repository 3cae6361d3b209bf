"""ColoredDoorKey: two keys of different colours; only the one of the door's colour opens it."""

from __future__ import annotations

from minigrid.core.constants import COLOR_NAMES
from minigrid.core.world_object import Key, WorldObj

from llmrl.common.registry import registry

from .env import When2AskEnv
from .simple_door_key import DEFAULTS


@registry.register_env(
    "ColoredDoorKey", max_episode_steps=100, kwargs=DEFAULTS, tags=("minigrid", "when2ask")
)
class ColoredDoorKeyEnv(When2AskEnv):
    """When2Ask ColoredDoorKey: find the key that matches the door among two."""

    def task_objects(self, door_color: str) -> list[WorldObj]:
        other = self._rand_elem([color for color in COLOR_NAMES if color != door_color])
        keys = [Key(door_color), Key(other)]
        return keys if self._rand_bool() else keys[::-1]
