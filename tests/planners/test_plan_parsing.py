"""Plan parsing: canonical skills from many answer shapes; never raises; invalid -> None."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from llmrl.planners.plan_parsing import split_steps
from llmrl.recipes.when2ask.prompts import GRAMMAR


def test_numbered_list_with_chatter():
    answer = (
        "Sure! Here is the plan:\n1. Go to the Red key.\n2) pick up the red key\n"
        "3 - open the red door"
    )
    assert GRAMMAR.parse_plan(answer) == [
        "go to the red key",
        "pick up the red key",
        "toggle the red door",
    ]


def test_single_line_with_then_and_commas():
    assert GRAMMAR.parse_plan("explore, then go to the goal") == ["explore", "go to the goal"]
    assert GRAMMAR.parse_plan("First, grab the blue key; then unlock the blue door.") == [
        "pick up the blue key",
        "toggle the blue door",
    ]


def test_invalid_plans_are_none():
    assert GRAMMAR.parse_plan("") is None
    assert GRAMMAR.parse_plan("1. 2. 3.") is None  # what a tiny model often answers
    assert GRAMMAR.parse_plan("go to the moon") is None  # a verb with no valid object
    assert GRAMMAR.parse_plan("pick up the key") is None  # colour missing: ambiguous
    assert GRAMMAR.parse_plan("go to the red key\nfly away\ntoggle the pink door") is None
    assert GRAMMAR.parse_plan("\n".join(["explore"] * 11)) is None  # longer than max_steps


def test_all_skills_enumerates_canonical_phrases():
    skills = GRAMMAR.all_skills(["red key", "goal"])
    assert "explore" in skills and "toggle the red key" in skills and "go to the goal" in skills
    assert all(GRAMMAR.parse_plan(s) == [s] for s in skills)


skill_strategy = st.builds(
    lambda verb, colour, obj: f"{verb} the {colour} {obj}",
    st.sampled_from(["go to", "pick up", "toggle"]),
    st.sampled_from(sorted(GRAMMAR.colours)),
    st.sampled_from(sorted(GRAMMAR.object_types)),
)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_never_raises(text):
    result = GRAMMAR.parse_plan(text)
    assert result is None or (result and all(GRAMMAR.parse_plan(s) == [s] for s in result))
    assert isinstance(split_steps(text), list)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(skill_strategy, min_size=1, max_size=6),
    st.sampled_from(["\n", "; ", ", then ", "\n- ", " then "]),
    st.booleans(),
)
def test_valid_plans_round_trip_in_any_layout(skills, separator, numbered):
    if numbered:
        text = "\n".join(f"{i + 1}. {s.capitalize()}." for i, s in enumerate(skills))
    else:
        text = separator.join(skills)
    assert GRAMMAR.parse_plan(text) == skills
