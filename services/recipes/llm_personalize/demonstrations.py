"""Demonstration episodes for bootstrapping: the demonstrator plays, the log looks like an LLM's.

`demonstration_episode` plays one Housekeep episode in an in-process world with a scripted
planner (default: `housekeep-demonstrator`) through the one rollout loop (`run_episode`, policy
kind `housekeep-demonstration`): each of its plans is recorded as an `LlmCall` whose `messages`
are exactly the prompt the LLM planner would be sent in that situation (`prompts.build_messages`)
and whose `response` is the plan in the planner's answer format. The plan is followed skill by
skill, re-planned after a failed skill, and the episode ends when the planner says the mission
is complete or the environment ends it. `datasets.bootstrap_dataset` turns such records into
SFT data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmrl.agents import EpisodeJob, RolloutResources, run_episode
from llmrl.common.episodes import EpisodeRecord
from llmrl.recipes.llm_personalize.driver import DEMONSTRATION_KIND

DEMONSTRATOR = "housekeep-demonstrator"
ENV = "Housekeep"


def demonstration_episode(
    *,
    seed: int,
    env_kwargs: Mapping[str, Any] | None = None,
    planner: str = DEMONSTRATOR,
    planner_kwargs: Mapping[str, Any] | None = None,
    few_shot: bool = True,
    query_every_step: bool = False,
    run_id: str = "demonstrations",
    episode_id: str | None = None,
    resources: RolloutResources | None = None,
) -> EpisodeRecord:
    """Play one Housekeep episode (`env_kwargs`: the env's settings, e.g. `data_dir`, `scene`,
    `episode`, `max_steps`) with the scripted `planner` and record it.

    `query_every_step`: the planner is asked at every step and only its plan's first skill is
    played (every state gets a logged plan). `resources` holds the world (reused across calls
    with the same `env_kwargs`); by default a fresh one is made and closed.
    """
    job = EpisodeJob(
        run_id=run_id,
        episode_id=episode_id or f"demonstration/{seed}",
        env=ENV,
        seed=seed,
        policy={
            "kind": DEMONSTRATION_KIND,
            "name": planner,
            "kwargs": dict(planner_kwargs or {}),
            "few_shot": few_shot,
            "query_every_step": query_every_step,
        },
        env_kwargs=dict(env_kwargs or {}),
    )
    if resources is not None:
        return run_episode(job, resources)
    own = RolloutResources()
    try:
        return run_episode(job, own)
    finally:
        own.close()
