"""The LLM planner's prompt and plan format for Housekeep, in one place.

The demonstrations that bootstrap the planner (recorded by `driver.py`) and the planner itself
(`llm_planner.py`) both build their chat messages here, so fine-tuning data and inference
prompts are identical:

    [system]  the task, the skills and the answer format
    [user]    a worked example's context          } few-shot pair (optional)
    [assistant] the example's plan                }
    [user]    the current context (the env's `text`: simulator/envs/housekeep/context.py)
    -> the planner answers with a numbered plan, or "mission complete"
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from llmrl.simulator.envs.base import InvalidSkillError
from llmrl.simulator.envs.housekeep.skills import (
    MISSION_COMPLETE,
    SKILL_TEMPLATES,
    normalize,
    parse_skill,
)

SYSTEM_PROMPT = (
    "You are a household robot tidying up a house. Some objects are misplaced: find them and "
    "put each one on a receptacle where most people would expect it. You only know the rooms "
    "you have explored; go to a room to see its receptacles and the objects on them. You have "
    "one hand: pick up one object, carry it, and place it before picking up another.\n"
    "Skills (use the exact names from the description):\n"
    + "\n".join(f"- {template}" for template in SKILL_TEMPLATES)
    + "\nAnswer with a numbered plan, one skill per line. When every object is where it "
    f'belongs, answer "{MISSION_COMPLETE}".'
)

EXAMPLE_CONTEXT = """Rooms of the house: bathroom_0, kitchen_0, living_room_0.
Explored rooms: bathroom_0, kitchen_0. Unexplored rooms: living_room_0.
Receptacles found, with the objects on them:
- in bathroom_0: sink_1 (frying_pan_1); bathtub_1 (shampoo_1)
- in kitchen_0: counter_1 (toothbrush_1); bottom_cabinet_1 (empty)
You are in kitchen_0, at counter_1. You are holding nothing.
Last action: go to counter_1 (done).
Steps left: 40."""

EXAMPLE_PLAN = (
    "pick up toothbrush_1",
    "go to sink_1",
    "place toothbrush_1 on sink_1",
    "pick up frying_pan_1",
    "go to bottom_cabinet_1",
    "place frying_pan_1 on bottom_cabinet_1",
    "go to room living_room_0",
)

USER_SUFFIX = "\nWhat is your plan?"


def format_plan(skills: list[str] | tuple[str, ...], done: bool = False) -> str:
    """A plan as the planner writes it: numbered skills, "mission complete" last when done."""
    lines = [*skills, MISSION_COMPLETE] if done else list(skills)
    return "\n".join(f"{i}. {line}" for i, line in enumerate(lines, 1))


def build_messages(context: str, few_shot: bool = True) -> list[dict[str, str]]:
    """The chat prompt for one planner query (OpenAI message format)."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    if few_shot:
        messages.append({"role": "user", "content": EXAMPLE_CONTEXT + USER_SUFFIX})
        messages.append({"role": "assistant", "content": format_plan(EXAMPLE_PLAN)})
    messages.append({"role": "user", "content": context + USER_SUFFIX})
    return messages


@dataclass
class ParsedPlan:
    skills: list[str] = field(default_factory=list)  # well-formed skills, canonical phrasing
    unparsable: list[str] = field(default_factory=list)  # lines that are no skill
    done: bool = False  # the planner said "mission complete"
    # every line in the planner's order: the canonical skill, or the raw line when it is none
    # (an executor charges those as failed steps)
    lines: list[str] = field(default_factory=list)


_BULLET = re.compile(r"^\s*(?:step\s*)?(?:\d+\s*[.):]|[-*•])\s*", re.IGNORECASE)


def parse_plan(text: str) -> ParsedPlan:
    """Read a planner's answer: one skill per line; stops at "mission complete"."""
    parsed = ParsedPlan()
    for raw in str(text).splitlines():
        line = _BULLET.sub("", raw).strip()
        if not line:
            continue
        if normalize(line) == MISSION_COMPLETE:
            parsed.done = True
            break
        try:
            parsed.skills.append(parse_skill(line).phrase())
            parsed.lines.append(parsed.skills[-1])
        except InvalidSkillError:
            parsed.unparsable.append(raw.strip())
            parsed.lines.append(raw.strip())
    return parsed
