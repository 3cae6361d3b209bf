"""ELLM's suggestion prompt and its tolerant parser: well-formed, partial and junk answers."""

from __future__ import annotations

import pytest

from llmrl.recipes.ellm.prompts import QUESTION, parse_suggestions, suggestion_messages
from llmrl.simulator.envs.crafter.vocabulary import GOALS, VERBS, canonical_goal


def test_prompt_has_the_valid_verbs_two_examples_and_the_caption_last():
    caption = "you see grass and tree. you are targeting tree. you feel thirsty."
    messages = suggestion_messages(caption)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[0]["content"].startswith("Valid actions: " + ", ".join(VERBS))
    for example in messages[1:4:2]:
        assert all(line.startswith("- ") for line in example["content"].split("\n"))
    assert messages[-1]["content"] == (
        "You see grass and tree. You are targeting tree. You feel thirsty. " + QUESTION
    )
    assert QUESTION == "What do you do?"


def test_well_formed_answer():
    answer = "- Chop tree\n- Attack cow.\n- Drink water\n- chop tree"
    assert parse_suggestions(answer) == ["chop tree", "attack cow", "drink water"]


def test_partial_answers_keep_their_goals():
    answer = (
        "Sure! Here is what to do:\n1. chop the tree, then drink water and eat cow\n"
        "2) Place Crafting Table!\n* kill the zombie\nsleep\n- make wood pic"
    )
    assert parse_suggestions(answer, complete=False) == [
        "chop tree",
        "drink water",
        "attack cow",
        "place crafting table",
        "attack zombie",
        "sleep",
    ]
    assert parse_suggestions("- mine stone\n- make wood pic", complete=True)[-1] == (
        "make wood pic"  # a finished answer keeps its last line
    )


@pytest.mark.parametrize("junk", ["", "1. 2. 3.", "I think you should explore.", "- - -", "\n\n"])
def test_junk_answers_are_unparsable(junk):
    assert parse_suggestions(junk) == []


def test_canonical_phrasings_of_equivalent_goals():
    assert canonical_goal("Eat cow.") == "attack cow"
    assert canonical_goal("make crafting table") == "place crafting table"
    assert canonical_goal("collect wood") == "chop tree"
    assert canonical_goal("craft a wooden pickaxe") == "make wood pickaxe"
    assert canonical_goal("dance") == "dance"
    assert all(canonical_goal(goal) == goal for goal in GOALS)
