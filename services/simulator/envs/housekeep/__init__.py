"""Housekeep: a symbolic rearrangement simulator driven by the real Housekeep episodes.

Modules: `house` (the static house), `data` (reading the Housekeep data), `procedural`
(generated houses), `skills` (phrases and action indices), `state` (what the agent knows),
`context` (that knowledge as text), `metrics`, `solver` (the demonstrator's strategy),
`records` (what episode logs keep of each step) and `env` (the registered `Housekeep`). The LLM
planner's prompt and plan format belong to the recipe (`llmrl.recipes.llm_personalize.prompts`).
"""

from .data import DATA_ENV_VAR, default_data_dir, load_house
from .env import HousekeepEnv
from .house import House, HouseObject, Receptacle
from .metrics import RearrangementMetrics, rearrangement_metrics
from .procedural import generate_house
from .state import KnownHouse

__all__ = [
    "DATA_ENV_VAR",
    "House",
    "HouseObject",
    "HousekeepEnv",
    "KnownHouse",
    "RearrangementMetrics",
    "Receptacle",
    "default_data_dir",
    "generate_house",
    "load_house",
    "rearrangement_metrics",
]
