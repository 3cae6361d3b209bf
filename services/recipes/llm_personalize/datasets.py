"""LLM-Personalize's dataset rules: from episode logs to fine-tuning data for the planner LLM.

Two datasets (Han et al. 2024), both OpenAI chat fine-tuning JSONL plus a statistics JSON, and
both registered with the annotator as dataset builders (`POST /datasets/bootstrap`,
`POST /datasets/self-training`):

* bootstrapping (`bootstrap_dataset`): every planner query of demonstration episodes
  becomes one example, the prompt the query sent followed by the demonstrator's answer.
* self-training (`self_training_dataset`): every planner query of the planner's own episodes
  is scored by the paper's reward over the steps it drove,
      objects found + receptacles found + 10 x change in correctly placed objects,
  and selected by one of two rules (`selection`):
  - "query": queries whose own steps did not improve placement are dropped;
  - "episode" (the default): episodes whose plans together did not raise the number of
    correctly placed objects are dropped, and every query of the others is kept (but one
    whose own steps lowered the count). Placing an
    object takes several queries (find it, pick it up, carry it, place it) and only the last
    one's steps raise the count, so per-query selection keeps almost nothing from a small
    model's episodes; the episode's gain credits the plans that led up to the placement.
  Either way a query's target is the plan made of its steps that succeeded (queries without
  one are dropped), and queries with the same prompt are de-duplicated (the best reward wins,
  the earliest on ties; under "episode" the reward is the episode's gain x 10 plus the query's).

A query "drives" the steps from its own step `t` up to the next query's step (several queries
at one step, i.e. re-asks, leave their steps to the last of them). Step records carry the
cumulative counters of `llmrl.simulator.envs.housekeep.records.RECORDED` in their `info`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from llmrl.annotator.datasets import (
    ChatExample,
    Dataset,
    DatasetRequest,
    build_from_episode_logs,
    load_episodes,
    prompt_messages,
    write_dataset,
)
from llmrl.common.episodes import EpisodeRecord, LlmCall, StepRecord
from llmrl.common.registry import registry
from llmrl.recipes.llm_personalize.prompts import format_plan

PLACEMENT_WEIGHT = 10.0
SKILL_DONE = 2  # SkillStatus.DONE, for step records that only carry `skill_status`


@dataclass
class QueryScore:
    """One planner query and what its steps achieved."""

    episode_id: str
    call_index: int  # position in the episode's llm_calls
    call: LlmCall
    steps: list[StepRecord]
    objects_found: int
    receptacles_found: int
    placement_delta: int
    reward: float
    successful_skills: list[str]


# -- scoring queries ----------------------------------------------------------------------
def skill_succeeded(step: StepRecord) -> bool:
    if "skill_success" in step.info:
        return bool(step.info["skill_success"])
    return step.info.get("skill_status") == SKILL_DONE


def _counters(step: StepRecord | None, first: StepRecord | None) -> tuple[int, int, int]:
    """(objects found, receptacles found, correctly placed) after `step`; before any step
    nothing is found and the correctly placed objects are those right at the start."""
    if step is None:
        start = int(first.info.get("correct_at_start", 0)) if first is not None else 0
        return 0, 0, start
    info = step.info
    missing = [
        k for k in ("objects_found", "receptacles_found", "correctly_placed") if k not in info
    ]
    if missing:
        raise ValueError(
            f"step {step.t} lacks the counters {', '.join(missing)} in its info; record steps "
            "with a driver whose record_observations include llmrl.simulator.envs.housekeep."
            "records.RECORDED"
        )
    return int(info["objects_found"]), int(info["receptacles_found"]), int(info["correctly_placed"])


def query_steps(episode: EpisodeRecord) -> list[list[StepRecord]]:
    """The steps each of the episode's LLM calls drove (same order as `llm_calls`)."""
    calls = episode.llm_calls
    driven: list[list[StepRecord]] = [[] for _ in calls]
    for i, call in enumerate(calls):
        later = [c.t for c in calls[i + 1 :]]
        if later and later[0] == call.t:
            continue  # a re-ask at the same step: the later call drives the steps
        end = min((t for t in later if t > call.t), default=None)
        driven[i] = [s for s in episode.steps if s.t >= call.t and (end is None or s.t < end)]
    return driven


def score_queries(
    episode: EpisodeRecord, placement_weight: float = PLACEMENT_WEIGHT
) -> list[QueryScore]:
    """Score every planner query of `episode` by the LLM-Personalize reward."""
    steps = sorted(episode.steps, key=lambda s: s.t)
    previous = {s.t: p for p, s in zip([None, *steps], steps, strict=False)}
    first = steps[0] if steps else None
    scores = []
    for index, (call, driven) in enumerate(
        zip(episode.llm_calls, query_steps(episode), strict=True)
    ):
        if driven:
            before = _counters(previous[driven[0].t], first)
            after = _counters(driven[-1], first)
        else:
            before = after = (0, 0, 0)
        objects, receptacles, placed = (a - b for a, b in zip(after, before, strict=True))
        scores.append(
            QueryScore(
                episode_id=episode.episode_id,
                call_index=index,
                call=call,
                steps=driven,
                objects_found=objects,
                receptacles_found=receptacles,
                placement_delta=placed,
                reward=objects + receptacles + placement_weight * placed,
                successful_skills=[s.skill for s in driven if s.skill and skill_succeeded(s)],
            )
        )
    return scores


# -- building datasets --------------------------------------------------------------------
def _prompt_key(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages, sort_keys=True, ensure_ascii=False)


def _source(episode: EpisodeRecord, index: int) -> str:
    return f"{episode.run_id}/{episode.episode_id}#{index}"


def bootstrap_dataset(episodes: Iterable[EpisodeRecord], dedupe: bool = False) -> Dataset:
    """SFT pairs from demonstrations: each query's prompt and the demonstrator's answer.

    Every demonstrated query is an example, so a situation weighs in the data as often as the
    demonstrator met it: an episode's first query (nothing explored yet) has the same prompt
    in every episode of a scene, and kept once it would be one example among hundreds, as
    rare as any late, one-off situation. `dedupe` keeps identical (prompt, answer) pairs once
    (counted as `duplicate` in the statistics). Calls without messages or answer are skipped
    (counted too).
    """
    episodes = list(episodes)
    examples: list[ChatExample] = []
    seen: set[str] = set()
    dropped: Counter[str] = Counter()
    queries = 0
    for episode in episodes:
        for index, call in enumerate(episode.llm_calls):
            queries += 1
            if not call.messages or not call.response.strip():
                dropped["empty_prompt_or_response"] += 1
                continue
            messages = [
                *prompt_messages(call),
                {"role": "assistant", "content": call.response.strip()},
            ]
            if dedupe:
                key = _prompt_key(messages)
                if key in seen:
                    dropped["duplicate"] += 1
                    continue
                seen.add(key)
            examples.append(ChatExample(messages, _source(episode, index)))
    stats = _stats("bootstrap", episodes, queries, examples, dropped)
    return Dataset(examples, stats)


def episode_placement_gain(episode: EpisodeRecord) -> int:
    """Correctly placed objects at the episode's end minus at its start."""
    steps = sorted(episode.steps, key=lambda s: s.t)
    if not steps:
        return 0
    start = _counters(None, steps[0])[2]
    return _counters(steps[-1], steps[0])[2] - start


def select_episodes(
    episodes: Iterable[EpisodeRecord], min_placement_gain: int = 1
) -> tuple[list[EpisodeRecord], list[EpisodeRecord]]:
    """(kept, dropped): the episodes whose plans raised the number of correctly placed
    objects by at least `min_placement_gain`, and the rest, each in the given order."""
    kept, dropped = [], []
    for episode in episodes:
        gain = episode_placement_gain(episode)
        (kept if gain >= min_placement_gain else dropped).append(episode)
    return kept, dropped


SELECTIONS = ("episode", "query")


def self_training_dataset(
    episodes: Iterable[EpisodeRecord],
    min_placement_gain: int = 1,
    placement_weight: float = PLACEMENT_WEIGHT,
    selection: str = "episode",
) -> Dataset:
    """Reward-filtered, de-duplicated SFT pairs from the planner's own episodes.

    `selection="query"` keeps a query when its own steps raised the number of correctly
    placed objects by at least `min_placement_gain`; `selection="episode"` keeps every query
    of an episode whose plans together did (`select_episodes`). A kept query's target is the
    plan of its successful steps; among queries with the same prompt, the one with the
    highest reward is kept (the earliest on ties).
    """
    if selection not in SELECTIONS:
        raise ValueError(f"selection must be one of {', '.join(SELECTIONS)}, got {selection!r}")
    episodes = list(episodes)
    best: dict[str, tuple[QueryScore, ChatExample]] = {}
    order: list[str] = []
    dropped: Counter[str] = Counter()
    queries = 0
    kept_episodes: set[str] = set()
    if selection == "episode":
        kept_episodes = {e.episode_id for e in select_episodes(episodes, min_placement_gain)[0]}
    for episode in episodes:
        gain = episode_placement_gain(episode)
        for score in score_queries(episode, placement_weight):
            queries += 1
            if selection == "episode":
                if episode.episode_id not in kept_episodes:
                    dropped["episode_without_placement_gain"] += 1
                    continue
                if score.placement_delta < 0:  # never imitate the plan that undid a placement
                    dropped["placement_worse"] += 1
                    continue
                score.reward += placement_weight * gain  # the episode's gain ranks duplicates
            elif score.placement_delta < min_placement_gain:
                dropped["no_placement_gain"] += 1
                continue
            if not score.successful_skills or not score.call.messages:
                dropped["no_successful_steps"] += 1
                continue
            target = format_plan(score.successful_skills)  # the planner's own format
            messages = [*prompt_messages(score.call), {"role": "assistant", "content": target}]
            example = ChatExample(messages, _source(episode, score.call_index), score.reward)
            key = _prompt_key(prompt_messages(score.call))
            if key in best:
                dropped["duplicate_prompt"] += 1
                if score.reward > best[key][0].reward:
                    best[key] = (score, example)
                continue
            best[key] = (score, example)
            order.append(key)
    examples = [best[key][1] for key in order]
    stats = _stats("self_training", episodes, queries, examples, dropped)
    stats["min_placement_gain"] = min_placement_gain
    stats["selection"] = selection
    gains = [episode_placement_gain(e) for e in episodes]
    stats["episodes_with_placement_gain"] = sum(g >= min_placement_gain for g in gains)
    stats["episodes_with_examples"] = len({best[key][0].episode_id for key in order})
    stats["mean_episode_placement_gain"] = _mean(gains)
    return Dataset(examples, stats)


def _stats(
    kind: str,
    episodes: Sequence[EpisodeRecord],
    queries: int,
    examples: list[ChatExample],
    dropped: Counter[str],
) -> dict[str, Any]:
    rewards = [e.reward for e in examples]
    targets = [e.messages[-1]["content"] for e in examples]
    characters = [sum(len(m["content"]) for m in e.messages) for e in examples]
    success = [ep.metrics["success_rate"] for ep in episodes if "success_rate" in ep.metrics]
    return {
        "kind": kind,
        "episodes": len(episodes),
        "queries": queries,
        "examples": len(examples),
        "dropped": dict(sorted(dropped.items())),
        "policies": dict(Counter(ep.policy for ep in episodes)),
        "mean_episode_success_rate": _mean(success),
        "reward": {
            "mean": _mean(rewards),
            "min": min(rewards, default=0.0),
            "max": max(rewards, default=0.0),
        },
        "mean_target_skills": _mean([len(t.splitlines()) for t in targets]),
        "mean_example_characters": _mean(characters),
        "approx_tokens": sum(characters) // 4,  # ~4 characters per token for English text
    }


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


# -- files and the annotator's builders ----------------------------------------------------
def build_bootstrap_dataset(
    sources: Iterable[str | Path | EpisodeRecord],
    out_dir: str | Path,
    name: str = "bootstrap",
    dedupe: bool = False,
) -> dict[str, Any]:
    """Episode logs of demonstrations -> `<out_dir>/<name>.jsonl` + stats; returns paths+stats."""
    dataset = bootstrap_dataset(load_episodes(sources), dedupe=dedupe)
    return {**write_dataset(dataset, out_dir, name), "stats_data": dataset.stats}


def build_self_training_dataset(
    sources: Iterable[str | Path | EpisodeRecord],
    out_dir: str | Path,
    name: str = "self_training",
    min_placement_gain: int = 1,
    selection: str = "episode",
) -> dict[str, Any]:
    """The planner's episode logs -> selected `<out_dir>/<name>.jsonl` + stats."""
    dataset = self_training_dataset(load_episodes(sources), min_placement_gain, selection=selection)
    return {**write_dataset(dataset, out_dir, name), "stats_data": dataset.stats}


class SelfTrainingRequest(DatasetRequest):
    min_placement_gain: int = Field(
        1, ge=0, description="objects a kept query (or episode) must place"
    )
    selection: Literal["episode", "query"] = Field(
        "episode",
        description="episode: keep every query of episodes that raised correct placements; "
        "query: keep the queries whose own steps did",
    )


class BootstrapRequest(DatasetRequest):
    dedupe: bool = Field(
        False,
        description="keep identical (prompt, plan) pairs once (false: every demonstrated query, "
        "so a situation weighs as often as it was met)",
    )


@registry.register_dataset(
    "bootstrap", "LLM-Personalize: SFT data from demonstrations", request=BootstrapRequest
)
def bootstrap_builder(request: BootstrapRequest) -> dict[str, Any]:
    return build_from_episode_logs(
        request, "bootstrap", lambda episodes: bootstrap_dataset(episodes, dedupe=request.dedupe)
    )


@registry.register_dataset(
    "self-training",
    "LLM-Personalize: reward-filtered, de-duplicated queries of the planner's own episodes",
    request=SelfTrainingRequest,
)
def self_training_builder(request: SelfTrainingRequest) -> dict[str, Any]:
    return build_from_episode_logs(
        request,
        "self-training",
        lambda episodes: self_training_dataset(
            episodes, request.min_placement_gain, selection=request.selection
        ),
    )
