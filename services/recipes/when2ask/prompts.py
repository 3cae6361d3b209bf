"""The When2Ask planner's prompt and skill grammar for the MiniGrid tasks.

The few-shot examples are written for this project (not taken from the paper): they show
the skill vocabulary of `llmrl.simulator.envs.when2ask` and the plan format, one skill per
line, on situations of the four tasks.
"""

from __future__ import annotations

from typing import Any

from llmrl.planners.base import observation_text
from llmrl.planners.plan_parsing import SkillGrammar

COLOURS = frozenset({"red", "green", "blue", "purple", "yellow", "grey"})

GRAMMAR = SkillGrammar(
    verbs={
        "explore": "explore",
        "go to": "go to",
        "walk to": "go to",
        "move to": "go to",
        "navigate to": "go to",
        "pick up": "pick up",
        "grab": "pick up",
        "take": "pick up",
        "toggle": "toggle",
        "open": "toggle",
        "unlock": "toggle",
    },
    bare_verbs=frozenset({"explore"}),
    colours=COLOURS,
    object_types=frozenset({"key", "door", "box", "ball"}),
    colourless_objects=frozenset({"goal"}),
)

SYSTEM = (
    "You plan for a robot in a grid world. Its task: reach the goal, which lies behind a "
    "locked door. A locked door opens with the key of the same colour; a key may be hidden "
    "inside a box, which opens when toggled. The robot can only use objects it has seen.\n"
    "Skills: explore | go to the <colour> <object> | pick up the <colour> <object> | "
    "toggle the <colour> <object> | go to the goal.\n"
    "Answer with the plan only: skills, one per line."
)

EXAMPLES: list[tuple[str, str]] = [
    ("You have seen nothing yet. You carry nothing.", "explore"),
    (
        "You have seen a yellow key, a locked yellow door. You carry nothing.",
        "go to the yellow key\npick up the yellow key\ngo to the yellow door\n"
        "toggle the yellow door",
    ),
    (
        "You have seen a locked purple door, a grey box. You carry nothing.",
        "go to the grey box\ntoggle the grey box",
    ),
    (
        "You have seen a locked green door, a green key, a blue key. You carry the blue key.",
        "go to the green key\npick up the green key\ngo to the green door\ntoggle the green door",
    ),
    (
        "You have seen an open red door, the goal. You carry the red key.",
        "go to the goal",
    ),
]


def planner_messages(observation: dict[str, Any]) -> list[dict[str, str]]:
    """System prompt, the few-shot examples as past turns, then the current knowledge."""
    messages = [{"role": "system", "content": SYSTEM}]
    for situation, plan in EXAMPLES:
        messages.append({"role": "user", "content": situation})
        messages.append({"role": "assistant", "content": plan})
    messages.append({"role": "user", "content": observation_text(observation.get("text", ""))})
    return messages
