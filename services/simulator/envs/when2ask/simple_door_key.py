"""SimpleDoorKey: a key of the door's colour lies on the agent's side."""

from __future__ import annotations

from minigrid.core.world_object import Key, WorldObj

from llmrl.common.registry import registry

from .env import When2AskEnv

DEFAULTS = {"min_room_size": 5, "max_room_size": 10, "agent_view_size": 3, "max_steps": 100}


@registry.register_env(
    "SimpleDoorKey", max_episode_steps=100, kwargs=DEFAULTS, tags=("minigrid", "when2ask")
)
class SimpleDoorKeyEnv(When2AskEnv):
    """When2Ask SimpleDoorKey: pick up the key, unlock the door, reach the goal."""

    def task_objects(self, door_color: str) -> list[WorldObj]:
        return [Key(door_color)]
