"""Episode records: what rollout workers write and the annotator and evaluators read.

One episode is one JSON object (a line of an episode log, `episodes.jsonl`). Its id is
deterministic (`<phase>/<index>`), which is what makes storing it idempotent: an episode
delivered twice by the queue is stored once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class StepRecord:
    """One low-level or skill step: what was observed, what was done, what came back."""

    t: int
    text: str | None = None  # the observation in words before acting, for text environments
    action: int | None = None  # the low-level action, when one was sent
    skill: str | None = None  # the skill-level action, when one was sent
    reward: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)  # environment/recipe specifics


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
