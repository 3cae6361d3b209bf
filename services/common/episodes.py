"""Episode records: what rollout workers write and the annotator and evaluators read.

One episode is one JSON object (a line of an episode log, `episodes.jsonl`). Its id is
deterministic (`<phase>/<index>`), which is what makes storing it idempotent: an episode
delivered twice by the queue is stored once.

A step's low-level action is an int (a discrete action) or a list of floats (a continuous,
`Box` action, flattened), so that both survive the JSON round trip as they were sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# A recorded low-level action: discrete (int) or continuous (the Box action's floats, flat).
Action = int | list[float]


def record_action(action: Any) -> Action | None:
    """`action` as a step record keeps it: an integer stays an int; a float or an array of
    numbers (a continuous action) becomes a flat list of floats."""
    if action is None:
        return None
    try:
        values = np.asarray(action)
    except ValueError:  # ragged nesting
        values = np.asarray(None)
    if values.dtype.kind not in "iuf":  # booleans and text are no actions
        raise TypeError(f"action: expected an integer or numbers, got {action!r}")
    if values.dtype.kind in "iu" and values.ndim == 0:
        return int(values)
    return [float(value) for value in values.ravel()]


@dataclass
class StepRecord:
    """One low-level or skill step: what was observed, what was done, what came back."""

    t: int
    text: str | None = None  # the observation in words before acting, for text environments
    action: Action | None = None  # the low-level action, when one was sent (see record_action)
    skill: str | None = None  # the skill-level action, when one was sent
    reward: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)  # environment/recipe specifics

    def __post_init__(self) -> None:
        self.action = record_action(self.action)  # numpy values become JSON-ready ones


@dataclass
class LlmCall:
    """One query to a language model through the gateway (planner, goal suggester...)."""

    t: int  # the step at which it was made
    messages: list[dict[str, str]]  # the chat prompt, OpenAI format
    response: str  # the raw completion (or the chosen candidate for score-based planners)
    parsed: list[str] = field(default_factory=list)  # e.g. the plan's skills
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_result(
        cls, t: int, messages: list[dict[str, str]], response: str, parsed: list[str], result: Any
    ) -> LlmCall:
        """A call from a gateway result (ChatResult or ScoreResult: model, tokens, cost)."""
        return cls(
            t=t,
            messages=list(messages),
            response=response,
            parsed=list(parsed),
            model=getattr(result, "model", "") or "",
            prompt_tokens=int(getattr(result, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(result, "completion_tokens", 0) or 0),
            cost_usd=float(getattr(result, "cost_usd", 0.0) or 0.0),
            cached=bool(getattr(result, "cached", False)),
        )


@dataclass
class EpisodeRecord:
    run_id: str
    episode_id: str  # deterministic within a run, e.g. "evaluate/17"
    env: str
    seed: int
    policy: str  # planner or policy name, e.g. "oracle", "llm:smollm2", "ppo"
    steps: list[StepRecord] = field(default_factory=list)
    llm_calls: list[LlmCall] = field(default_factory=list)
    episode_return: float = 0.0
    length: int = 0
    success: bool = False
    metrics: dict[str, float] = field(default_factory=dict)  # recipe-specific per-episode figures

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeRecord:
        data = dict(data)
        data["steps"] = [StepRecord(**s) for s in data.get("steps", [])]
        data["llm_calls"] = [LlmCall(**c) for c in data.get("llm_calls", [])]
        return cls(**data)

    @classmethod
    def from_json(cls, line: str) -> EpisodeRecord:
        return cls.from_dict(json.loads(line))


def actions_array(steps: Sequence[StepRecord]) -> np.ndarray:
    """The steps' actions as one array: int64 with -1 for "no action" when every action is
    discrete; float32 of shape (len(steps), action size) with NaN rows for "no action" when
    they are continuous."""
    actions = [step.action for step in steps]
    continuous = [a for a in actions if isinstance(a, list)]
    if not continuous:
        return np.array([-1 if a is None else a for a in actions], dtype=np.int64)
    if len(continuous) != sum(a is not None for a in actions):
        raise ValueError("action: the steps mix discrete and continuous actions")
    sizes = {len(a) for a in continuous}
    if len(sizes) != 1:
        raise ValueError(f"action: the steps' continuous actions differ in size: {sorted(sizes)}")
    out = np.full((len(actions), sizes.pop()), np.nan, dtype=np.float32)
    for i, action in enumerate(actions):
        if action is not None:
            out[i] = action
    return out


def write_jsonl(path: str | Path, episodes: Iterable[EpisodeRecord]) -> int:
    """Append episodes to a JSONL log; returns how many were written."""
    count = 0
    with open(path, "a", encoding="utf-8") as handle:
        for episode in episodes:
            handle.write(episode.to_json() + "\n")
            count += 1
    return count


def read_jsonl(path: str | Path) -> Iterator[EpisodeRecord]:
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    yield EpisodeRecord.from_json(line)
                except (json.JSONDecodeError, TypeError) as exc:
                    raise ValueError(f"{path}:{number}: not an episode record: {exc}") from exc
