"""The counts behind llm-personalize's success rates, read back from a run.

With a few evaluation episodes per scene, a success rate is a handful of placements. These
counts say which ones (the report phase writes them to `diagnostics.md`):
- per phase and split: the pick-ups and placements the planner completed, and the episodes
  that raised or lowered the number of correctly placed objects (`phase_behaviour`);
- per SFT dataset: the skills its target plans teach (`target_verbs`);
- per scene: how many of the held-out episodes' misplaced objects have a category that a
  training episode also had misplaced (`shared_categories`). This bounds what imitating the
  training episodes can transfer;
- per split and pair of stages: the mean per-episode difference of success rate with its 95%
  bootstrap interval (`paired_differences`). Every stage plays the same evaluation episodes,
  so a stage's gain is measured episode by episode, and an interval above 0 is a gain beyond
  the noise of that many episodes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llmrl.common.episodes import EpisodeRecord
from llmrl.common.stats import estimate
from llmrl.recipes.llm_personalize.config import LlmPersonalizeConfig
from llmrl.recipes.llm_personalize.datasets import episode_placement_gain, skill_succeeded
from llmrl.recipes.llm_personalize.prompts import parse_plan
from llmrl.simulator.envs.housekeep.skills import parse_skill


def phase_behaviour(
    phase: str, records: Sequence[EpisodeRecord], splits: Sequence[str]
) -> list[dict[str, Any]]:
    """One row per split of `phase`'s episodes (`splits[i]`: the split of episode i)."""
    rows: dict[str, dict[str, Any]] = {}
    for record, split in zip(records, splits, strict=True):
        row = rows.setdefault(
            split,
            {"phase": phase, "episodes": split, "n": 0, "pick_ups": 0, "placements": 0,
             "raised": 0, "lowered": 0},
        )  # fmt: skip
        completed = Counter(
            parse_skill(step.skill).verb
            for step in record.steps
            if step.skill and skill_succeeded(step)
        )
        gain = episode_placement_gain(record)
        row["n"] += 1
        row["pick_ups"] += completed["pick_up"]
        row["placements"] += completed["place"]
        row["raised"] += gain > 0
        row["lowered"] += gain < 0
    return list(rows.values())


def target_verbs(dataset: str | Path) -> Counter[str]:
    """The skills (by verb) of an SFT dataset's target plans, and their "mission_complete"s."""
    verbs: Counter[str] = Counter()
    for line in Path(dataset).read_text().splitlines():
        plan = parse_plan(json.loads(line)["messages"][-1]["content"])
        verbs.update(parse_skill(skill).verb for skill in plan.skills)
        verbs["mission_complete"] += plan.done
    return verbs


def shared_categories(config: LlmPersonalizeConfig) -> list[dict[str, Any]]:
    """Per scene: held-out misplaced objects, and those whose category was misplaced in one of
    the training episodes (empty for procedural houses, which have no fixed episodes)."""
    if config.data_dir is None:
        return []
    rows, folder = [], config.data_folder()
    for scene in config.scene_list():
        train = set().union(*(_misplaced(folder, scene, e) for e in range(config.train_episodes)))
        held_out = [
            category
            for e in range(config.train_episodes, config.train_episodes + config.eval_episodes)
            for category in _misplaced(folder, scene, e)
        ]
        shared = sum(category in train for category in held_out)
        rows.append({"scene": scene, "held_out_misplaced": len(held_out), "shared": shared})
    return rows


def _misplaced(data_dir: str, scene: str, episode: int) -> list[str]:
    from llmrl.simulator.envs.housekeep.data import load_house

    house = load_house(data_dir, scene, episode)
    return [house.objects[o].category for o in house.misplaced_objects()]


def paired_differences(
    success: dict[str, Sequence[float]],
    splits: Sequence[str],
    comparisons: Sequence[tuple[str, str]],
) -> list[dict[str, Any]]:
    """One row per split and (later, earlier) stage pair: the mean over episodes of
    success[later][i] - success[earlier][i], with its 95% bootstrap interval.

    `success[stage][i]` is evaluation episode i's success rate under that stage and
    `splits[i]` its split: every stage plays the same episodes, in the same order.
    `beyond_noise` says whether the interval lies above 0 (a gain) or below it (a loss).
    """
    rows = []
    for split in dict.fromkeys(splits):
        picked = [i for i, s in enumerate(splits) if s == split]
        for later, earlier in comparisons:
            if later not in success or earlier not in success:
                continue
            diffs = [success[later][i] - success[earlier][i] for i in picked]
            est = estimate(diffs)
            rows.append(
                {
                    "episodes": split,
                    "comparison": f"{later} - {earlier}",
                    "n": est.n,
                    "mean": round(est.mean, 2),
                    "low": est.low,
                    "high": est.high,
                    "beyond_noise": est.n > 1 and (est.low > 0 or est.high < 0),
                }
            )
    return rows
