"""`run_episode`: the one rollout loop, used by rollout workers, the embedded runner, recipes
and the annotator's datasets.

The loop steps a one-env world (simulator worlds: in-process or over gRPC, same API) until the
environment ends the episode, the driver stops, or `max_steps` is reached, and returns an
`EpisodeRecord` with every step and every LLM call. Success is the environment's `success`
observation where it has one, else "terminated with a positive final reward" (MiniGrid's
convention). Actions may be discrete (an int) or continuous (a sequence of floats): the loop
sends either as a batch of one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmrl.agents.episode import Action, EpisodeJob, make_driver
from llmrl.agents.resources import RolloutResources
from llmrl.common.episodes import EpisodeRecord, StepRecord

LAST = 2  # dm_env step type of an episode's final step
HARD_STEP_CAP = 100_000  # a safety net for drivers that never stop on envs without a time limit
WORLD_ENTRIES = ("reward", "discount", "step_type")


def _first(batch: dict[str, np.ndarray]) -> dict[str, Any]:
    """Env 0's entries of a batched observation, as plain Python values."""
    single = {}
    for name, value in batch.items():
        item = value[0] if isinstance(value, np.ndarray) and value.ndim >= 1 else value
        single[name] = item.item() if isinstance(item, np.generic) else item
    return single


def _recorded(observation: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """The entries `names` of one env's observation that it has, as JSON-ready values."""
    recorded = {}
    for name in names:
        if name in observation:
            value = observation[name]
            recorded[name] = value.tolist() if isinstance(value, np.ndarray) else value
    return recorded


def _recorded_action(action: Action | None) -> int | list[float] | None:
    """An action as a step record keeps it: an int, or a list of floats."""
    if action is None or isinstance(action, int | np.integer):
        return None if action is None else int(action)
    return [float(x) for x in np.asarray(action, dtype=float).reshape(-1)]


def run_episode(job: EpisodeJob, resources: RolloutResources) -> EpisodeRecord:
    """Play one episode of `job` and return its record (the one rollout loop of llmrl)."""
    driver = make_driver(job.policy, resources, job)
    world = resources.world(job.env, job.env_kwargs)
    available = world.observation_space.spaces
    observations = list(
        dict.fromkeys(
            [
                *driver.observations,
                *(name for name in driver.optional_observations if name in available),
                *(name for name in driver.record_observations if name in available),
                *WORLD_ENTRIES,
            ]
        )
    )
    on_demand = [n for n in dict.fromkeys(driver.on_demand_observations) if n not in observations]
    if on_demand:
        # an inactive step moves nothing and returns the entries as they stand
        driver.bind_look(lambda names: _first(world.step(active=[False], observations=list(names))))
    record = EpisodeRecord(
        run_id=job.run_id,
        episode_id=job.episode_id,
        env=job.env,
        seed=job.seed,
        policy=job.policy_name,
    )
    driver.reset()
    obs = _first(world.reset(seed=job.seed, observations=[*observations, *on_demand]))
    limit = min(job.max_steps or HARD_STEP_CAP, HARD_STEP_CAP)
    t, terminated, last_reward = 0, False, 0.0
    stop_reason = "max_steps"
    while t < limit:
        decision = driver.act(obs, t)
        for call in decision.llm_calls:
            call.t = t
        record.llm_calls.extend(decision.llm_calls)
        if decision.stop:
            stop_reason = str(decision.info.get("stop", "driver"))
            break
        step = StepRecord(
            t=t,
            text=obs.get("text"),
            action=_recorded_action(decision.action),  # type: ignore[arg-type]
            skill=decision.skill,
        )
        batch = world.step(
            action=None if decision.action is None else np.asarray([decision.action]),
            skill=None if decision.skill is None else [decision.skill],
            observations=observations,
        )
        obs = _first(batch)
        step.reward = float(obs["reward"])
        if "skill_status" in obs:
            step.info["skill_status"] = int(obs["skill_status"])
        step.info.update(decision.info)
        step.info.update(_recorded(obs, driver.record_observations))
        record.steps.append(step)
        record.episode_return += step.reward
        last_reward = step.reward
        t += 1
        if int(obs["step_type"]) == LAST:
            terminated = float(obs["discount"]) == 0.0
            stop_reason = "terminated" if terminated else "truncated"
            break
    record.length = t
    if "success" in obs:
        record.success = bool(obs["success"])
    else:
        record.success = terminated and last_reward > 0
    for name, value in _recorded(obs, driver.record_observations).items():
        if isinstance(value, int | float):
            record.metrics[name] = float(value)
    calls = record.llm_calls
    record.metrics.update(
        {
            "llm_calls": float(len(calls)),
            "llm_tokens": float(sum(c.prompt_tokens + c.completion_tokens for c in calls)),
            "llm_cost_usd": float(sum(c.cost_usd for c in calls)),
            "llm_cached_calls": float(sum(1 for c in calls if c.cached)),
        }
    )
    record.metrics["stop_" + stop_reason.replace(" ", "_")] = 1.0
    return record
