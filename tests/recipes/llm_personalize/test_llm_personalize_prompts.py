"""The LLM planner's prompt and plan format."""

from __future__ import annotations

from llmrl.recipes.llm_personalize.prompts import (
    EXAMPLE_PLAN,
    SYSTEM_PROMPT,
    build_messages,
    format_plan,
    parse_plan,
)
from llmrl.simulator.envs.housekeep.skills import SKILL_TEMPLATES, parse_skill, skills_over
from llmrl.simulator.envs.housekeep.state import KnownHouse


def test_messages_are_system_few_shot_and_context():
    messages = build_messages("CONTEXT", few_shot=True)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"] == SYSTEM_PROMPT
    assert all(template in SYSTEM_PROMPT for template in SKILL_TEMPLATES)
    assert messages[-1]["content"].startswith("CONTEXT")
    assert [m["role"] for m in build_messages("CONTEXT", few_shot=False)] == ["system", "user"]


def test_plan_round_trip_and_mission_complete():
    text = format_plan(list(EXAMPLE_PLAN), done=True)
    assert text.splitlines()[0] == "1. pick up toothbrush_1"
    parsed = parse_plan(text)
    assert parsed.skills == list(EXAMPLE_PLAN) and parsed.done and not parsed.unparsable
    assert parse_plan("mission complete").done


def test_parse_plan_keeps_unparsable_lines_apart():
    parsed = parse_plan("Plan:\n1) Go to room Kitchen_0.\n- pick up the mug 1\n3. dance\n")
    assert parsed.skills == ["go to room kitchen_0", "pick up mug_1"]
    assert parsed.unparsable == ["Plan:", "3. dance"]
    assert not parsed.done


def test_the_guided_vocabulary_is_every_skill_over_known_names():
    known = KnownHouse(
        rooms=["kitchen_0", "bathroom_0"],
        explored_rooms=["kitchen_0"],
        receptacles={"counter_1": "kitchen_0", "sink_1": "kitchen_0"},
        inspected=["counter_1", "sink_1"],
        objects={"mug_1": "counter_1"},
        held="book_1",
        room="kitchen_0",
        at="counter_1",
    )
    skills = skills_over(known)
    assert skills == [
        "go to room kitchen_0", "go to room bathroom_0",
        "go to counter_1", "go to sink_1", "go to mug_1",
        "look at counter_1", "look at sink_1",
        "pick up mug_1",
        "place mug_1 on counter_1", "place mug_1 on sink_1",
        "place book_1 on counter_1", "place book_1 on sink_1",
        "mission complete",
    ]  # fmt: skip
    assert all(parse_skill(skill).phrase() == skill for skill in skills)
    assert "go to room bedroom_0" not in skills and "pick up book_1" not in skills
