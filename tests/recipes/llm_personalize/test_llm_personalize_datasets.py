"""Annotator datasets: query scoring, self-training selection and de-duplication, bootstrap data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmrl.annotator.datasets import write_dataset
from llmrl.common.chat_format import chat_jsonl_errors
from llmrl.common.episodes import EpisodeRecord, LlmCall, StepRecord, write_jsonl
from llmrl.recipes.llm_personalize.datasets import (
    bootstrap_dataset,
    build_self_training_dataset,
    episode_placement_gain,
    query_steps,
    score_queries,
    select_episodes,
    self_training_dataset,
)
from llmrl.recipes.llm_personalize.demonstrations import demonstration_episode
from llmrl.recipes.llm_personalize.prompts import build_messages


def call(t: int, context: str, response: str = "1. something") -> LlmCall:
    return LlmCall(t=t, messages=build_messages(context, few_shot=False), response=response)


def step(t: int, skill: str, ok: bool, objects: int, receptacles: int, placed: int) -> StepRecord:
    info = {
        "skill_success": ok,
        "objects_found": objects,
        "receptacles_found": receptacles,
        "correctly_placed": placed,
        "correct_at_start": 2,
    }
    return StepRecord(t=t, skill=skill, info=info)


def episode(episode_id: str, calls: list[LlmCall], steps: list[StepRecord]) -> EpisodeRecord:
    return EpisodeRecord("run", episode_id, "Housekeep", 0, "llm", steps=steps, llm_calls=calls)


def explore_then_carry(episode_id: str, carry_prompt: str, placed_after: int) -> EpisodeRecord:
    """Query 0 explores; query 1 fails a skill; a re-ask; query 3 carries (placement 2 -> N)."""
    return episode(
        episode_id,
        [
            call(0, "nothing explored"),
            call(2, "kitchen and bedroom explored"),
            call(4, "re-asked, first answer"),  # a re-ask at the same step: drives nothing
            call(4, carry_prompt),
        ],
        [
            step(0, "go to room kitchen_0", True, 2, 2, 2),
            step(1, "go to room bedroom_0", True, 3, 4, 2),
            step(2, "go to mug_1", True, 3, 4, 2),
            step(3, "go to counterr_1", False, 3, 4, 2),
            step(4, "pick up mug_1", True, 3, 4, 2),
            step(5, "place mug_1 on counter_1", False, 3, 4, 2),  # not at the counter yet
            step(6, "go to counter_1", True, 3, 4, 2),
            step(7, "place mug_1 on counter_1", True, 3, 4, placed_after),
        ],
    )


def test_steps_are_attributed_to_the_query_that_drove_them():
    record = explore_then_carry("a", "carry", 3)
    assert [[s.t for s in steps] for steps in query_steps(record)] == [
        [0, 1],
        [2, 3],
        [],
        [4, 5, 6, 7],
    ]


def test_query_reward_is_found_objects_receptacles_and_ten_times_placement():
    scores = score_queries(explore_then_carry("a", "carry", 3))
    assert [s.reward for s in scores] == [3 + 4 + 0.0, 0.0, 0.0, 10.0]
    assert [s.placement_delta for s in scores] == [0, 0, 0, 1]
    assert (scores[0].objects_found, scores[0].receptacles_found) == (3, 4)
    # the first step's baseline: nothing found, the objects right at the start placed
    first = episode("b", [call(0, "x")], [step(0, "go to room kitchen_0", True, 1, 2, 3)])
    assert score_queries(first)[0].reward == 1 + 2 + 10.0


def test_self_training_keeps_improving_queries_with_only_their_successful_steps():
    dataset = self_training_dataset([explore_then_carry("a", "carry", 3)], selection="query")
    assert len(dataset.examples) == 1
    (example,) = dataset.examples
    assert example.messages[-2]["content"].startswith("carry")
    assert example.messages[-1] == {
        "role": "assistant",
        "content": "1. pick up mug_1\n2. go to counter_1\n3. place mug_1 on counter_1",
    }
    assert example.reward == 10.0 and example.source == "run/a#3"
    assert dataset.stats["dropped"] == {"no_placement_gain": 3}


def test_self_training_drops_queries_that_make_placement_worse():
    dataset = self_training_dataset([explore_then_carry("a", "carry", 1)], selection="query")
    assert dataset.examples == [] and dataset.stats["dropped"] == {"no_placement_gain": 4}


def test_duplicate_prompts_keep_the_best_reward_and_the_earliest_on_ties():
    first = explore_then_carry("first", "same prompt", 3)  # reward 10
    better = explore_then_carry("better", "same prompt", 4)  # reward 20
    tie = explore_then_carry("tie", "same prompt", 4)  # reward 20, later
    other = explore_then_carry("other", "another prompt", 3)
    dataset = self_training_dataset([first, better, tie, other], selection="query")
    assert [e.source for e in dataset.examples] == ["run/better#3", "run/other#3"]
    assert [e.reward for e in dataset.examples] == [20.0, 10.0]
    assert dataset.stats["dropped"]["duplicate_prompt"] == 2
    assert dataset.stats["examples"] == 2 and dataset.stats["queries"] == 16


def test_steps_without_counters_are_reported():
    record = episode("c", [call(0, "x")], [StepRecord(t=0, skill="go to room a", info={})])
    with pytest.raises(ValueError, match="objects_found"):
        score_queries(record)


def test_bootstrap_from_demonstrations_gives_valid_chat_data(tmp_path):
    demos = [demonstration_episode(seed=seed) for seed in range(3)]
    assert all(d.metrics["success_rate"] == 100.0 and d.success for d in demos)
    for demo in demos:
        assert demo.llm_calls[-1].response == "1. mission complete"
        assert demo.llm_calls[0].messages == build_messages(demo.steps[0].text)
    calls = sum(len(d.llm_calls) for d in demos)
    # every demonstrated query is an example: a repeated episode weighs twice
    every = bootstrap_dataset(demos + demos[:1])
    assert len(every.examples) == calls + len(demos[0].llm_calls)
    assert "duplicate" not in every.stats["dropped"]
    # dedupe keeps identical (prompt, plan) pairs once: the repeated episode adds nothing
    dataset = bootstrap_dataset(demos + demos[:1], dedupe=True)
    assert len(dataset.examples) <= calls
    assert dataset.stats["dropped"]["duplicate"] >= len(demos[0].llm_calls)
    paths = write_dataset(dataset, tmp_path, "bootstrap")
    assert chat_jsonl_errors(paths["data"]) == []
    lines = Path(paths["data"]).read_text().splitlines()
    assert len(lines) == len(dataset.examples)
    assert json.loads(lines[0])["messages"][-1]["content"] == demos[0].llm_calls[0].response

    # self-training on the demonstrations keeps the carrying queries only
    selected = self_training_dataset(demos, selection="query")
    assert 0 < len(selected.examples) < calls
    assert all("pick up" in e.messages[-1]["content"] for e in selected.examples)


def test_self_training_dataset_from_an_episode_log(tmp_path):
    log = tmp_path / "episodes.jsonl"
    write_jsonl(log, [explore_then_carry("a", "p1", 3), explore_then_carry("b", "p2", 4)])
    result = build_self_training_dataset([log], tmp_path / "out", selection="query")
    stats = json.loads(Path(result["stats"]).read_text())
    assert stats == result["stats_data"] and stats["examples"] == 2
    assert stats["reward"] == {"mean": 15.0, "min": 10.0, "max": 20.0}
    assert chat_jsonl_errors(result["data"]) == []


def test_episode_selection_keeps_the_episodes_that_raised_placements_and_drops_the_rest():
    raised = explore_then_carry("raised", "carry", 3)  # 2 -> 3 correctly placed
    flat = explore_then_carry("flat", "carry to nowhere", 2)  # no change
    worse = explore_then_carry("worse", "carry away", 1)  # 2 -> 1
    assert [episode_placement_gain(e) for e in (raised, flat, worse)] == [1, 0, -1]
    kept, dropped = select_episodes([flat, raised, worse])
    assert kept == [raised] and dropped == [flat, worse]

    dataset = self_training_dataset([flat, raised, worse], selection="episode")
    # every query of the kept episode that drove a successful step; the re-ask drove none
    assert [e.source for e in dataset.examples] == ["run/raised#0", "run/raised#1", "run/raised#3"]
    assert [e.messages[-1]["content"] for e in dataset.examples] == [
        "1. go to room kitchen_0\n2. go to room bedroom_0",
        "1. go to mug_1",
        "1. pick up mug_1\n2. go to counter_1\n3. place mug_1 on counter_1",
    ]
    # ranked by the episode's gain (x 10) plus the query's own reward
    assert [e.reward for e in dataset.examples] == [10.0 + 7.0, 10.0, 10.0 + 10.0]
    assert dataset.stats["dropped"] == {
        "episode_without_placement_gain": 8,
        "no_successful_steps": 1,
    }
    assert dataset.stats["episodes_with_placement_gain"] == 1
    assert dataset.stats["episodes_with_examples"] == 1
    # the per-query rule keeps only the query that did the placing
    by_query = self_training_dataset([flat, raised, worse], selection="query")
    assert [e.source for e in by_query.examples] == ["run/raised#3"]


def test_episode_selection_drops_a_query_that_undid_a_placement():
    steps = [
        step(0, "place mug_1 on counter_1", True, 3, 4, 4),  # 2 -> 4
        step(1, "pick up mug_1", True, 3, 4, 3),  # 4 -> 3: undone
    ]
    record = episode("e", [call(0, "place"), call(1, "undo")], steps)
    dataset = self_training_dataset([record], selection="episode")
    assert [e.source for e in dataset.examples] == ["run/e#0"]
    assert dataset.stats["dropped"] == {"placement_worse": 1}


def test_unknown_selection_is_named():
    with pytest.raises(ValueError, match="selection must be one of episode, query"):
        self_training_dataset([], selection="best")


def test_a_replayed_bootstrap_subset_is_seeded_in_order_and_the_whole_file_when_small(tmp_path):
    from llmrl.recipes.llm_personalize.train import replay_subset

    source = tmp_path / "bootstrap.jsonl"
    lines = [json.dumps({"example": i}) for i in range(10)]
    source.write_text("\n".join(lines) + "\n")
    first = replay_subset(str(source), 4, seed=1, dest=tmp_path / "replay-1.jsonl")
    again = replay_subset(str(source), 4, seed=1, dest=tmp_path / "again.jsonl")
    other = replay_subset(str(source), 4, seed=2, dest=tmp_path / "replay-2.jsonl")
    kept = Path(first["data"]).read_text().splitlines()
    assert first["examples"] == 4 and len(kept) == 4
    assert kept == Path(again["data"]).read_text().splitlines()  # the same seed, the same subset
    assert kept != Path(other["data"]).read_text().splitlines()  # another round, another one
    assert [lines.index(line) for line in kept] == sorted(lines.index(line) for line in kept)
    whole = replay_subset(str(source), 10, seed=1, dest=tmp_path / "unused.jsonl")
    assert whole == {"data": str(source), "examples": 10}
    assert not (tmp_path / "unused.jsonl").exists()
