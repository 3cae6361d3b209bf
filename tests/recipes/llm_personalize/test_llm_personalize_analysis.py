"""The counts behind the success rates: completed skills and placement changes per split, the
skills an SFT dataset teaches, and held-out categories that training episodes also had."""

from __future__ import annotations

import json
from pathlib import Path

from llmrl.common.episodes import EpisodeRecord, StepRecord
from llmrl.recipes.config import validate_config
from llmrl.recipes.llm_personalize.analysis import (
    paired_differences,
    phase_behaviour,
    shared_categories,
    target_verbs,
)
from llmrl.recipes.llm_personalize.prompts import build_messages, format_plan
from llmrl.simulator.envs.housekeep.data import load_house
from llmrl.simulator.envs.housekeep.metrics import is_correct


def played(episode_id: str, steps: list[tuple[str, bool, int]]) -> EpisodeRecord:
    """Steps as (skill, succeeded, correctly placed after it); one object right at the start."""
    records = [
        StepRecord(t=t, skill=skill, info={"skill_success": ok, "correctly_placed": placed,
                                            "correct_at_start": 1, "objects_found": 0,
                                            "receptacles_found": 0})
        for t, (skill, ok, placed) in enumerate(steps)
    ]  # fmt: skip
    return EpisodeRecord("run", episode_id, "Housekeep", 0, "llm", steps=records)


def test_behaviour_counts_completed_skills_and_episodes_by_placement_change_per_split():
    placing = played(
        "a",
        [("pick up mug_1", True, 1), ("place mug_1 on sink_1", False, 1),
         ("go to counter_1", True, 1), ("place mug_1 on counter_1", True, 2)],
    )  # fmt: skip
    misplacing = played("b", [("pick up cup_1", True, 0), ("place cup_1 on bed_1", True, 0)])
    idle = played("c", [("go to room kitchen_0", True, 1), ("pick up pan_1", False, 1)])
    rows = phase_behaviour(
        "evaluate/0", [placing, misplacing, idle], ["train", "held-out", "train"]
    )
    assert rows == [
        {"phase": "evaluate/0", "episodes": "train", "n": 2, "pick_ups": 1, "placements": 1,
         "raised": 1, "lowered": 0},
        {"phase": "evaluate/0", "episodes": "held-out", "n": 1, "pick_ups": 1, "placements": 1,
         "raised": 0, "lowered": 1},
    ]  # fmt: skip


def test_target_verbs_count_the_skills_of_each_target_plan(tmp_path: Path):
    path = tmp_path / "round-1.jsonl"
    plans = [
        format_plan(["go to room kitchen_0", "go to mug_1", "pick up mug_1"]),
        format_plan(["place mug_1 on counter_1"], done=True),
    ]
    lines = [
        json.dumps({"messages": [*build_messages("context"), {"role": "assistant", "content": p}]})
        for p in plans
    ]
    path.write_text("\n".join(lines) + "\n")
    verbs = target_verbs(path)
    assert verbs == {"go_to_room": 1, "go_to": 1, "pick_up": 1, "place": 1, "mission_complete": 1}


def test_shared_categories_count_held_out_misplaced_objects_seen_misplaced_in_training(
    data_dir: Path,
):
    config = validate_config(
        "llm-personalize",
        {"data_dir": str(data_dir), "scenes": ["Ihlen_1_int"], "train_episodes": 2,
         "eval_episodes": 2},
    )  # fmt: skip

    def misplaced(episode: int) -> list[str]:
        house = load_house(data_dir, "Ihlen_1_int", episode)
        return [
            o.category for i, o in enumerate(house.objects) if not is_correct(house, house.start, i)
        ]

    trained = set(misplaced(0)) | set(misplaced(1))
    held_out = misplaced(2) + misplaced(3)
    [row] = shared_categories(config)
    assert row == {
        "scene": "Ihlen_1_int",
        "held_out_misplaced": len(held_out),
        "shared": sum(c in trained for c in held_out),
    }
    assert row["held_out_misplaced"] > 0
    assert shared_categories(validate_config("llm-personalize", {"data_dir": "procedural"})) == []


def test_paired_differences_compare_stages_episode_by_episode_per_split():
    splits = ["train"] * 4 + ["held-out"] * 4
    success = {
        "zero-shot": [0, 0, 0, 0, -10, 0, 0, -5],
        "bootstrap": [20, 25, 30, 20, 0, 0, 0, -5],  # a gain on every training episode
        "round 1": [20, 25, 30, 20, 10, 0, -10, -5],  # held out: +10 and -10 cancel
    }
    comparisons = [("bootstrap", "zero-shot"), ("round 1", "bootstrap"), ("round 2", "round 1")]
    rows = {(r["episodes"], r["comparison"]): r for r in paired_differences(
        success, splits, comparisons)}  # fmt: skip
    # round 2 was not evaluated: its comparison is left out
    assert set(rows) == {(split, pair) for split in ("train", "held-out")
                         for pair in ("bootstrap - zero-shot", "round 1 - bootstrap")}  # fmt: skip
    gain = rows[("train", "bootstrap - zero-shot")]
    assert gain["n"] == 4 and gain["mean"] == 23.75
    assert gain["low"] > 0 and gain["beyond_noise"] is True
    held = rows[("held-out", "bootstrap - zero-shot")]
    assert held["mean"] == 2.5 and held["low"] == 0 and held["beyond_noise"] is False
    cancel = rows[("held-out", "round 1 - bootstrap")]
    assert cancel["mean"] == 0 and cancel["low"] < 0 < cancel["high"]
    assert cancel["beyond_noise"] is False
    same = rows[("train", "round 1 - bootstrap")]
    assert same["mean"] == 0 and same["beyond_noise"] is False  # no change is no gain
