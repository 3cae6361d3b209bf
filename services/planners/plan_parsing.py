"""Turning a language model's free-form plan into skill phrases an environment accepts.

Models answer in many shapes: numbered lists, bullets, "first ..., then ...", one line with
commas or semicolons, with chatter before and after. `split_steps` cuts the answer into
candidate steps; a `SkillGrammar` normalises each step to the canonical phrase
("Go to the Red key." -> "go to the red key") or rejects it. A step that names no skill verb
is chatter and is ignored; a step that names a verb but does not parse makes the whole plan
invalid, and the planner asks again. Nothing here raises on any input.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_NUMBERING = re.compile(r"^\s*(?:step\s*)?(?:\d+|[a-z])\s*[.):-]\s+", re.IGNORECASE)
_BULLET = re.compile(r"^\s*[-*•>]+\s*")
_SEPARATORS = re.compile(r"\s*(?:\n|;|,\s*(?:and\s+)?then\s+|,|\bthen\b|\band then\b|\.\s+)\s*")
_FILLER = re.compile(r"^(?:first|next|finally|after that|afterwards|and|then|now)\s*,?\s+")
_TRAILING = re.compile(r"[\s.!?\"'`]+$")
_LEADING = re.compile(r"^[\s\"'`]+")


def split_steps(text: str) -> list[str]:
    """Candidate plan steps, in order, lower-cased and stripped of numbering and filler."""
    if not isinstance(text, str):
        return []
    steps = []
    for line in text.replace("\r", "\n").split("\n"):
        line = _BULLET.sub("", _NUMBERING.sub("", line))
        for piece in _SEPARATORS.split(line):
            piece = _NUMBERING.sub("", piece.strip().lower())
            piece = _TRAILING.sub("", _LEADING.sub("", piece))
            while (stripped := _FILLER.sub("", piece)) != piece:
                piece = stripped
            if piece:
                steps.append(piece)
    return steps


@dataclass(frozen=True)
class SkillGrammar:
    """Skills of the form `<verb>` or `<verb> the <colour> <object>`.

    `verbs` maps every accepted verb phrase to its canonical verb ("open" -> "toggle");
    `bare_verbs` are the verbs that take no object ("explore").
    """

    verbs: dict[str, str]
    bare_verbs: frozenset[str]
    colours: frozenset[str]
    object_types: frozenset[str]
    colourless_objects: frozenset[str] = frozenset()  # e.g. "goal": there is only one

    def _verb_pattern(self) -> re.Pattern[str]:
        alternatives = sorted(self.verbs, key=len, reverse=True)
        return re.compile(r"\b(" + "|".join(re.escape(v) for v in alternatives) + r")\b")

    def mentions_skill(self, step: str) -> bool:
        return bool(self._verb_pattern().search(step))

    def normalise(self, step: str) -> str | None:
        """The canonical skill phrase for `step`, or None when it is not a skill."""
        match = self._verb_pattern().search(step)
        if match is None:
            return None
        verb = self.verbs[match.group(1)]
        rest = step[match.end() :].strip()
        if verb in self.bare_verbs:
            return verb if rest in ("", "the room", "the area", "around", "more") else None
        words = [w for w in re.split(r"\s+", rest) if w and w not in ("the", "a", "an", "to")]
        if len(words) == 1 and words[0] in self.colourless_objects:
            return f"{verb} the {words[0]}"
        if len(words) == 2 and words[0] in self.colours and words[1] in self.object_types:
            return f"{verb} the {words[0]} {words[1]}"
        return None

    def parse_plan(self, text: str, max_steps: int = 10) -> list[str] | None:
        """The plan's skills, or None when the answer is not a valid plan (then ask again)."""
        skills = []
        for step in split_steps(text):
            if not self.mentions_skill(step):
                continue  # chatter such as "here is the plan"
            skill = self.normalise(step)
            if skill is None:
                return None
            skills.append(skill)
        if not skills or len(skills) > max_steps:
            return None
        return skills

    def all_skills(self, objects: Iterable[str]) -> list[str]:
        """Every well-formed skill over the given object names ("red key", "goal")."""
        skills = sorted(self.bare_verbs)
        canonical = sorted(set(self.verbs.values()) - self.bare_verbs)
        for verb in canonical:
            skills.extend(f"{verb} the {name}" for name in objects)
        return skills
