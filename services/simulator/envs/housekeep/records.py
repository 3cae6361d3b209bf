"""What an episode log keeps of each Housekeep step, so that planner queries can be scored.

The environment's observations carry cumulative counters. A driver that plays Housekeep lists
`RECORDED` as its `record_observations`, so that the rollout loop (`llmrl.agents.run_episode`)
stores them after every step in `StepRecord.info` and the last observation's in
`EpisodeRecord.metrics`. LLM-Personalize's dataset rules
(`llmrl.recipes.llm_personalize.datasets`) read exactly these keys.
"""

from __future__ import annotations

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
)
RECORDED = (*STEP_COUNTERS, *EPISODE_METRICS)
