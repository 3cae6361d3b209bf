"""Meta-World v3 tasks as KALM uses them (`MetaWorld` env, `task` setting), their levels and
20 instructions per task (`tasks.py`). Needs the `metaworld` package (`llmrl[metaworld]`),
imported only when an env is built."""

from .env import MAX_EPISODE_STEPS, STATE_DIM, MetaWorldEnv, expert_policy, make_task_env
from .tasks import TASK_LEVELS, TASKS, instructions, level_of

__all__ = [
    "MAX_EPISODE_STEPS",
    "STATE_DIM",
    "TASKS",
    "TASK_LEVELS",
    "MetaWorldEnv",
    "expert_policy",
    "instructions",
    "level_of",
    "make_task_env",
]
