"""Demonstration episodes for bootstrapping: the demonstrator plays, the log looks like an LLM's.

`demonstration_episode` plays one Housekeep episode in-process with a scripted planner
(default: `housekeep-demonstrator`) and records each of its plans as an `LlmCall` whose
`messages` are exactly the prompt the LLM planner would be sent in that situation
(`llmrl.simulator.envs.housekeep.prompts.build_messages`) and whose `response` is the plan
in the planner's answer format. `bootstrap_dataset` turns such records into SFT data.

The loop mirrors the rollout driver: follow the plan, re-ask when it runs out or a skill
fails, stop when the planner says "mission complete" or the episode ends.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from llmrl.common.episodes import EpisodeRecord, LlmCall, StepRecord
from llmrl.common.registry import registry
from llmrl.planners.base import Planner, make_planner
from llmrl.simulator.envs.base import step_skill
from llmrl.simulator.envs.housekeep.prompts import build_messages, format_plan
from llmrl.simulator.envs.housekeep.records import episode_metrics, step_info

DEMONSTRATOR = "housekeep-demonstrator"


def make_housekeep_env(**env_kwargs: Any) -> gym.Env:
    return registry.get_env("Housekeep")(**env_kwargs)


def demonstration_episode(
    env: gym.Env,
    planner: Planner | None = None,
    *,
    seed: int,
    run_id: str = "demonstrations",
    episode_id: str | None = None,
    few_shot: bool = True,
    reset_options: dict[str, Any] | None = None,
    max_queries: int = 100,
    policy_name: str = DEMONSTRATOR,
) -> EpisodeRecord:
    """Play one episode of `env` (a Housekeep env) with `planner` and record it.

    `planner` defaults to a fresh `housekeep-demonstrator`; `policy_name` is what the record
    and its calls' `model` say played.
    """
    planner = planner or make_planner(DEMONSTRATOR)
    planner.reset()
    name = policy_name
    record = EpisodeRecord(
        run_id=run_id,
        episode_id=episode_id or f"demonstration/{seed}",
        env="Housekeep",
        seed=seed,
        policy=name,
    )
    obs, _ = env.reset(seed=seed, options=reset_options)
    t, ended = 0, False
    for _ in range(max_queries):
        plan = planner.plan(obs, t)
        record.llm_calls.append(
            LlmCall(
                t=t,
                messages=build_messages(str(obs["text"]), few_shot=few_shot),
                response=format_plan(plan.skills, plan.done),
                parsed=list(plan.skills),
                model=name,
                info={"done": plan.done},
            )
        )
        if plan.done or not plan.skills:
            break
        for skill in plan.skills:
            step = StepRecord(t=t, text=str(obs["text"]), skill=skill)
            obs, reward, terminated, truncated, _ = step_skill(env, skill)
            step.reward = float(reward)
            step.info = step_info(obs)
            record.steps.append(step)
            record.episode_return += step.reward
            t += 1
            ended = terminated or truncated
            if ended or not step.info["skill_success"]:
                break  # episode over, or re-plan after a failed skill
        if ended:
            break
    record.length = t
    record.metrics = episode_metrics(obs)
    record.success = bool(int(obs["success"]))
    return record
