"""When2Ask's MiniGrid tasks (Hu et al. 2023): SimpleDoorKey, KeyInBox, RandomBoxKey,
ColoredDoorKey, with skill-level actions, the agent's knowledge as text and a privileged
oracle planner. `env.py` holds what they share; one small module per task registers it."""
