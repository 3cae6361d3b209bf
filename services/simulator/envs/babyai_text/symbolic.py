"""The goal as numbers, for symbolic baselines that cannot read (Symbolic-PPO).

BabyAI's own agents read the instruction as word ids of its small grammar; `mission_tokens`
is that: the level's mission in the training words (never a variant's rewording, since the
symbolic entries stand for the grid and the task, not for what the agent reads), one id per
word or comma, 0-padded to `MAX_MISSION_WORDS`. Id 1 is a word outside `MISSION_VOCABULARY`.
"""

from __future__ import annotations

import re

import numpy as np
from gymnasium import spaces

MISSION_VOCABULARY: tuple[str, ...] = (
    *("<pad>", "<unknown>", ","),
    *("go", "to", "pick", "up", "put", "next", "open", "then", "after", "you", "and"),
    *("the", "a", "in", "front", "of", "behind", "on", "your", "left", "right"),
    *("ball", "box", "key", "door", "object"),
    *("red", "green", "blue", "purple", "yellow", "grey"),
)
MAX_MISSION_WORDS = 32
_IDS = {word: index for index, word in enumerate(MISSION_VOCABULARY)}


def mission_space() -> spaces.Box:
    return spaces.Box(0, len(MISSION_VOCABULARY) - 1, (MAX_MISSION_WORDS,), dtype=np.int64)


def mission_tokens(mission: str) -> np.ndarray:
    """Word ids of `mission` (a BabyAI instruction), 0-padded; longer ones are cut."""
    words = re.findall(r"[a-z]+|,", mission.lower())[:MAX_MISSION_WORDS]
    tokens = np.zeros(MAX_MISSION_WORDS, dtype=np.int64)
    tokens[: len(words)] = [_IDS.get(word, 1) for word in words]
    return tokens
