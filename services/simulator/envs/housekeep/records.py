"""What an episode log keeps of each Housekeep step, so the annotator can score planner queries.

The environment's observations carry cumulative counters; a rollout stores them per step
with `step_info(observation_after_step)` in `StepRecord.info`, and the episode's final
figures with `episode_metrics(last_observation)` in `EpisodeRecord.metrics`. The annotator
(`llmrl.annotator.datasets`) reads exactly these keys.
"""

from __future__ import annotations

from typing import Any

from ..base import SkillStatus

STEP_COUNTERS = (
    "objects_found",
    "receptacles_found",
    "rooms_explored",
    "correctly_placed",
    "correct_at_start",
    "misplaced_at_start",
)
EPISODE_METRICS = (
    "success_rate",
    "object_success",
    "soft_score",
    "distance",
    *STEP_COUNTERS,
)


def _number(value: Any) -> float:
    return float(value.item() if hasattr(value, "item") else value)


def step_info(observation: dict[str, Any]) -> dict[str, Any]:
    """Per-step record: the counters after the step and whether its skill succeeded."""
    info: dict[str, Any] = {name: int(_number(observation[name])) for name in STEP_COUNTERS}
    if "skill_status" in observation:
        status = int(_number(observation["skill_status"]))
        info["skill_status"] = status
        info["skill_success"] = status == SkillStatus.DONE
    return info


def episode_metrics(observation: dict[str, Any]) -> dict[str, float]:
    """The episode's final rearrangement figures from its last observation."""
    return {name: _number(observation[name]) for name in EPISODE_METRICS if name in observation}
