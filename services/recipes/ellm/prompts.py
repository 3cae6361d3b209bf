"""ELLM's prompt for goal suggestions, and the tolerant parser of the answers.

The prompt has ELLM's shape: the valid verbs, an instruction, two worked examples (a caption,
"What do you do?", a bullet list of goals), then the agent's caption and "What do you do?". As
a chat it is one user turn per caption and one assistant turn per answer, so chat models (the
gateway's local SmolLM2, or any OpenAI-compatible model) continue with a bullet list. The
examples are this project's own, on Crafter situations.

The parser takes what a model writes: bullets ("-", "*", "•"), numbers ("1.", "2)"), or bare
lines, items separated by newlines, commas, semicolons or " and "; an item is kept when it
starts with a valid verb. Items are lower-cased, stripped of articles and trailing
punctuation, put in their canonical phrasing ("eat cow" -> "attack cow") and de-duplicated in
order. An answer without any such item is unparsable (an empty list).
"""

from __future__ import annotations

import re

from llmrl.simulator.envs.crafter.vocabulary import VERBS, canonical_goal

INSTRUCTION = (
    "You advise the player of a survival game. List the most useful things to do next, given "
    "what the player sees and carries: one short goal per line, each a valid action with a "
    "thing in view or in the inventory."
)
QUESTION = "What do you do?"
EXAMPLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "you see cow, grass, and tree. you are targeting tree. you feel hungry.",
        ("chop tree", "attack cow", "chop grass"),
    ),
    (
        "you see sand, stone, and water. you are targeting water. you have in your inventory "
        "wood, wood pickaxe. you feel thirsty.",
        ("drink water", "mine stone", "place crafting table"),
    ),
)

_BULLET = re.compile(r"^\s*(?:[-*•·]+|\(?\d+[.)]|[a-z][.)](?=\s))\s*")
_SEPARATORS = re.compile(r"[,;]|\band\b|\bthen\b")
_ARTICLES = re.compile(r"\b(?:a|an|the|some)\b")
_KEEP = re.compile(r"[^a-z ]+")


def sentence_case(caption: str) -> str:
    """ "you see tree. you feel thirsty." -> "You see tree. You feel thirsty." (ELLM's form)."""
    return ". ".join(part[:1].upper() + part[1:] for part in caption.strip().split(". "))


def question(caption: str) -> str:
    return f"{sentence_case(caption)} {QUESTION}"


def bullet_list(goals: tuple[str, ...] | list[str]) -> str:
    return "\n".join(f"- {goal[:1].upper()}{goal[1:]}" for goal in goals)


def valid_verbs_line(verbs: tuple[str, ...] = VERBS) -> str:
    return f"Valid actions: {', '.join(verbs)}"


def suggestion_messages(caption: str, verbs: tuple[str, ...] = VERBS) -> list[dict[str, str]]:
    """The chat asking for goals in the state `caption` (module docstring)."""
    first_caption, first_goals = EXAMPLES[0]
    messages = [
        {
            "role": "user",
            "content": f"{valid_verbs_line(verbs)}\n{INSTRUCTION}\n\n{question(first_caption)}",
        },
        {"role": "assistant", "content": bullet_list(first_goals)},
    ]
    for example_caption, goals in EXAMPLES[1:]:
        messages.append({"role": "user", "content": question(example_caption)})
        messages.append({"role": "assistant", "content": bullet_list(goals)})
    messages.append({"role": "user", "content": question(caption)})
    return messages


def parse_suggestions(
    answer: str, verbs: tuple[str, ...] = VERBS, complete: bool = True
) -> list[str]:
    """The goals in a model's answer (module docstring); [] when there are none.

    `complete=False` says the answer was cut off (the token limit): its last line may be a
    fragment ("- make wood pic") and is dropped.
    """
    lines = answer.replace("\r", "\n").split("\n")
    if not complete and len(lines) > 0:
        lines = lines[:-1]
    verb_set = set(verbs)
    goals: list[str] = []
    for line in lines:
        body = _BULLET.sub("", line.lower(), count=1)
        for item in _SEPARATORS.split(body):
            words = _KEEP.sub(" ", _ARTICLES.sub(" ", item)).split()
            if words and words[0] in verb_set and len(words) <= 4:
                goals.append(canonical_goal(" ".join(words)))
    return list(dict.fromkeys(goals))
