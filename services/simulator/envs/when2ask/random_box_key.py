"""RandomBoxKey: the door's key lies on the floor or in a box, at random (even odds).

With the key on the floor the box is there too, empty, as a distraction.
"""

from __future__ import annotations

from minigrid.core.constants import COLOR_NAMES
from minigrid.core.world_object import Box, Key, WorldObj

from llmrl.common.registry import registry

from .env import When2AskEnv
from .simple_door_key import DEFAULTS


@registry.register_env(
    "RandomBoxKey", max_episode_steps=100, kwargs=DEFAULTS, tags=("minigrid", "when2ask")
)
class RandomBoxKeyEnv(When2AskEnv):
    """When2Ask RandomBoxKey: the key may be hidden in a box, or lie beside an empty one."""

    def task_objects(self, door_color: str) -> list[WorldObj]:
        box_color = self._rand_elem(COLOR_NAMES)
        if self._rand_bool():
            return [Box(box_color, contains=Key(door_color))]
        return [Key(door_color), Box(box_color)]
