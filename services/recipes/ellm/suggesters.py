"""ELLM's goal suggesters: what the agent should try next, given a caption of its state.

Every suggester answers `suggest(caption, achieved, state=None) -> list[str]`: goal phrases in
ELLM's vocabulary ("chop tree", "place crafting table"; `vocabulary.GOALS`), in their canonical
phrasing, without duplicates and without the goals in `achieved` (those achieved this episode:
ELLM's novelty filter). `counters()` says how it got its answers.

Registered (`registry.register_suggester`), built with `make_suggester(spec, connect_llm=...)`:

* `llm`: asks a language model through the gateway with ELLM's prompt (`prompts.py`) and parses
  its bullet list; an unparsable answer gives no goals and is counted. Each distinct caption is
  asked once: answers are cached by caption (so the model is asked only when the caption
  changes, and never twice for one caption), and the gateway caches them across runs too.
* `llm-score`: the cheap path for small local models: the model scores every goal of a fixed
  list as the answer to the same prompt, by log-likelihood (gateway `score`, one batched call
  per caption, cached), and the `top_k` best that are not achieved are the suggestions.
* `oracle`: ELLM's SimpleOracle: the goals whose prerequisites hold in the structured state
  (`state`: the env's `inventory` and `local_map`), no language model.
* `all-goals`: every goal not achieved yet (the "all goals" novelty baseline).

`suggest_many` answers a batch of envs at once: the LLM suggesters send the captions they have
not seen concurrently, so that the gateway batches them on its local model.
"""

from __future__ import annotations

import inspect
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, Literal

import numpy as np

from llmrl.common.registry import registry
from llmrl.recipes.ellm.prompts import parse_suggestions, suggestion_messages
from llmrl.simulator.envs.crafter.vocabulary import (
    GOAL_PREREQUISITES,
    GOALS,
    INVENTORY_ITEMS,
    SEMANTIC_NAMES,
    VERBS,
    canonical_goal,
)

COUNTERS = (
    "calls",  # suggest() calls
    "asked",  # queries sent to the gateway
    "cache_hits",  # calls answered from the suggester's own cache (a caption seen before)
    "gateway_cache_hits",  # queries the gateway answered from its cache
    "unparsable",  # answers without a single goal
    "prompt_tokens",
    "completion_tokens",
)
MAX_CONCURRENT_QUERIES = 8


def _check_int(name: str, value: Any, low: int, high: int) -> int:
    is_int = isinstance(value, int | np.integer) and not isinstance(value, bool)
    if not is_int or not low <= value <= high:
        raise ValueError(f"{name}: expected an integer in [{low}, {high}], got {value!r}")
    return int(value)


def _check_goals(name: str, goals: Any) -> tuple[str, ...]:
    if isinstance(goals, str) or not isinstance(goals, Sequence) or not goals:
        raise ValueError(f"{name}: expected a non-empty list of goal phrases, got {goals!r}")
    if not all(isinstance(goal, str) and goal.strip() for goal in goals):
        raise ValueError(f"{name}: every goal must be a non-empty string, got {goals!r}")
    return tuple(dict.fromkeys(canonical_goal(goal) for goal in goals))


class Suggester(ABC):
    """Base of the registered suggesters (module docstring)."""

    uses_llm: ClassVar[bool] = False

    def __init__(self) -> None:
        self._counters = dict.fromkeys(COUNTERS, 0)
        self._lock = threading.Lock()

    @abstractmethod
    def candidates(self, caption: str, state: Mapping[str, Any] | None) -> list[str]:
        """The goals for this state before the achieved ones are removed (canonical)."""

    def suggest(
        self,
        caption: str,
        achieved: Sequence[str] = (),
        *,
        state: Mapping[str, Any] | None = None,
    ) -> list[str]:
        """Goals for the state `caption`, without those in `achieved` (module docstring)."""
        self._count("calls")
        done = {canonical_goal(goal) for goal in achieved}
        return [goal for goal in self.candidates(str(caption), state) if goal not in done]

    def suggest_many(
        self,
        captions: Sequence[str],
        achieved: Sequence[Sequence[str]],
        *,
        states: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> list[list[str]]:
        """`suggest` for a batch of envs (one caption, achieved list and state per env)."""
        if len(achieved) != len(captions) or (states is not None and len(states) != len(captions)):
            raise ValueError("captions, achieved and states need one entry per env")
        rows = states if states is not None else [None] * len(captions)
        return [
            self.suggest(caption, done, state=state)
            for caption, done, state in zip(captions, achieved, rows, strict=True)
        ]

    def counters(self) -> dict[str, int]:
        """How the answers were got so far (COUNTERS)."""
        with self._lock:
            return dict(self._counters)

    def _count(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counters[name] += amount


class CachedLlmSuggester(Suggester):
    """A suggester that asks the gateway once per distinct caption and caches the answer."""

    uses_llm = True

    def __init__(
        self,
        llm: Any,
        model: str | None,
        run_id: str,
        tag: str,
        cache_size: int,
    ) -> None:
        super().__init__()
        if llm is None:
            raise ValueError("llm: this suggester needs a gateway client (connect_llm)")
        self.llm = llm
        self.model = model
        self.run_id = str(run_id)
        self.tag = str(tag)
        self.cache_size = _check_int("cache_size", cache_size, 1, 10_000_000)
        self._cache: OrderedDict[str, Any] = OrderedDict()

    @abstractmethod
    def ask(self, caption: str) -> Any:
        """Query the gateway for `caption` (counting it) and return what is to be cached."""

    @abstractmethod
    def goals_from(self, answer: Any) -> list[str]:
        """The candidate goals of a cached answer."""

    def _cached(self, caption: str) -> Any | None:
        with self._lock:
            if caption in self._cache:
                self._cache.move_to_end(caption)
                return self._cache[caption]
        return None

    def _store(self, caption: str, answer: Any) -> None:
        with self._lock:
            self._cache[caption] = answer
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def candidates(self, caption: str, state: Mapping[str, Any] | None) -> list[str]:
        answer = self._cached(caption)
        if answer is None:
            answer = self.ask(caption)
            self._store(caption, answer)
        else:
            self._count("cache_hits")
        return self.goals_from(answer)

    def suggest_many(
        self,
        captions: Sequence[str],
        achieved: Sequence[Sequence[str]],
        *,
        states: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> list[list[str]]:
        unseen = [c for c in dict.fromkeys(map(str, captions)) if self._cached(c) is None]
        if len(unseen) > 1:  # concurrent queries: the gateway batches them on a local model
            with ThreadPoolExecutor(min(len(unseen), MAX_CONCURRENT_QUERIES)) as pool:
                answers = list(pool.map(self.ask, unseen))
            for caption, answer in zip(unseen, answers, strict=True):
                self._store(caption, answer)
            # each fresh answer's first use below is found in the cache: not a cache hit
            self._count("cache_hits", -len(unseen))
        return super().suggest_many(captions, achieved, states=states)

    def _account(self, result: Any, completion: bool = True) -> None:
        self._count("asked")
        self._count("gateway_cache_hits", int(bool(result.cached)))
        self._count("prompt_tokens", int(result.prompt_tokens))
        if completion:
            self._count("completion_tokens", int(result.completion_tokens))


@registry.register_suggester(
    "llm", "ELLM: a language model writes goals for the caption (gateway chat, parsed, cached)"
)
class LlmSuggester(CachedLlmSuggester):
    """Goals written by a language model through the gateway (module docstring).

    Keyword arguments: `llm` the gateway client; `model` the gateway model (None: its default);
    `run_id`, `tag` what the gateway bills the calls to; `max_tokens` the answer's length limit
    (48); `temperature` (0: deterministic answers, which the gateway caches); `max_goals` the
    most goals kept from one answer (8); `cache_size` captions remembered (100,000).
    """

    def __init__(
        self,
        llm: Any = None,
        model: str | None = None,
        run_id: str = "default",
        tag: str = "ellm/suggester",
        max_tokens: int = 48,
        temperature: float = 0.0,
        max_goals: int = 8,
        cache_size: int = 100_000,
    ) -> None:
        super().__init__(llm, model, run_id, tag, cache_size)
        self.max_tokens = _check_int("max_tokens", max_tokens, 1, 1024)
        self.max_goals = _check_int("max_goals", max_goals, 1, 64)
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, int | float)
            or not (0 <= temperature <= 2)
        ):
            raise ValueError(f"temperature: expected a number in [0, 2], got {temperature!r}")
        self.temperature = float(temperature)

    def ask(self, caption: str) -> list[str]:
        result = self.llm.chat(
            suggestion_messages(caption),
            model=self.model,
            run_id=self.run_id,
            tag=self.tag,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        )
        self._account(result)
        answer = result.texts[0] if result.texts else ""
        finished = not result.finish_reasons or result.finish_reasons[0] != "length"
        goals = parse_suggestions(answer, VERBS, complete=finished)
        if not goals:
            self._count("unparsable")
        return goals[: self.max_goals]

    def goals_from(self, answer: list[str]) -> list[str]:
        return list(answer)


@registry.register_suggester(
    "llm-score", "ELLM, score mode: a language model ranks a fixed goal list by log-likelihood"
)
class LlmScoreSuggester(CachedLlmSuggester):
    """The `top_k` goals of a fixed list that a language model finds likeliest as the answer
    to ELLM's prompt (module docstring).

    Keyword arguments: `llm`, `model`, `run_id`, `tag` as for `llm`; `goals` the candidate list
    (default `vocabulary.GOALS`, ELLM's 22 goals); `top_k` how many to suggest (3, ELLM's
    examples' length); `score_norm` "mean" (per-token log-probability, fair to long goals) or
    "sum"; `cache_size` captions remembered (100,000).
    """

    def __init__(
        self,
        llm: Any = None,
        model: str | None = None,
        run_id: str = "default",
        tag: str = "ellm/suggester-score",
        goals: Sequence[str] = GOALS,
        top_k: int = 3,
        score_norm: Literal["mean", "sum"] = "mean",
        cache_size: int = 100_000,
    ) -> None:
        super().__init__(llm, model, run_id, tag, cache_size)
        self.goals = _check_goals("goals", goals)
        self.top_k = _check_int("top_k", top_k, 1, len(self.goals))
        if score_norm not in ("mean", "sum"):
            raise ValueError(f"score_norm: expected 'mean' or 'sum', got {score_norm!r}")
        self.score_norm = score_norm

    def ask(self, caption: str) -> list[str]:
        """Every goal of the list, likeliest first (the ranking is what is cached)."""
        candidates = [f"- {goal[:1].upper()}{goal[1:]}" for goal in self.goals]
        result = self.llm.score(
            suggestion_messages(caption),
            candidates,
            model=self.model,
            run_id=self.run_id,
            tag=self.tag,
        )
        self._account(result, completion=False)
        scores = np.asarray(result.logprobs, dtype=np.float64)
        if self.score_norm == "mean":
            scores /= np.asarray([max(len(row), 1) for row in result.token_logprobs])
        order = np.argsort(-scores, kind="stable")
        return [self.goals[i] for i in order]

    def goals_from(self, answer: list[str]) -> list[str]:
        return list(answer)

    def suggest(
        self,
        caption: str,
        achieved: Sequence[str] = (),
        *,
        state: Mapping[str, Any] | None = None,
    ) -> list[str]:
        return super().suggest(caption, achieved, state=state)[: self.top_k]


def state_things(state: Mapping[str, Any]) -> tuple[dict[str, int], set[str]]:
    """(inventory by item, names of the things in view) of an env's structured state: its
    `inventory` (crafter's order, or a mapping) and `local_map` (semantic ids)."""
    for key in ("inventory", "local_map"):
        if key not in state:
            raise ValueError(f"state: needs {key!r} (the env's observation entries), got keys "
                             f"{sorted(state)}")  # fmt: skip
    inventory = state["inventory"]
    if not isinstance(inventory, Mapping):
        counts = np.asarray(inventory).reshape(-1)
        if counts.shape != (len(INVENTORY_ITEMS),):
            raise ValueError(f"state: 'inventory' needs {len(INVENTORY_ITEMS)} counts in crafter's "
                             f"order, got shape {counts.shape}")  # fmt: skip
        inventory = dict(zip(INVENTORY_ITEMS, counts.tolist(), strict=True))
    ids = np.unique(np.asarray(state["local_map"])).tolist()
    seen = {SEMANTIC_NAMES[i] for i in ids if 0 <= i < len(SEMANTIC_NAMES)}
    return {item: int(count) for item, count in inventory.items()}, seen


def feasible_goals(state: Mapping[str, Any], goals: Sequence[str] = GOALS) -> list[str]:
    """The goals (canonical phrasings of `GOAL_PREREQUISITES`) whose prerequisites hold."""
    inventory, seen = state_things(state)
    feasible = []
    for goal in goals:
        needs = GOAL_PREREQUISITES[goal]
        has_items = all(inventory.get(item, 0) >= count for item, count in needs.inventory.items())
        if has_items and all(thing in seen for thing in needs.in_view):
            feasible.append(goal)
    return feasible


@registry.register_suggester(
    "oracle", "ELLM's SimpleOracle: the goals whose prerequisites hold in inventory and view"
)
class OracleSuggester(Suggester):
    """Goals whose prerequisites (crafter's rules, `vocabulary.GOAL_PREREQUISITES`) hold in the
    structured state; `suggest` needs `state=` (the env's `inventory` and `local_map`).

    Keyword arguments: `goals` the goals considered (default all of `vocabulary.GOALS`).
    """

    def __init__(self, goals: Sequence[str] = GOALS) -> None:
        super().__init__()
        self.goals = _check_goals("goals", goals)
        unknown = [goal for goal in self.goals if goal not in GOAL_PREREQUISITES]
        if unknown:
            raise ValueError(f"goals: {unknown} have no known prerequisites; goals: {list(GOALS)}")

    def candidates(self, caption: str, state: Mapping[str, Any] | None) -> list[str]:
        if state is None:
            raise ValueError("state: the oracle suggester needs the structured state "
                             "(the env's 'inventory' and 'local_map')")  # fmt: skip
        return feasible_goals(state, self.goals)


@registry.register_suggester("all-goals", "Every goal not achieved yet (novelty baseline)")
class AllGoalsSuggester(Suggester):
    """Every goal of the list that is not achieved yet, whatever the state.

    Keyword arguments: `goals` the list (default `vocabulary.GOALS`).
    """

    def __init__(self, goals: Sequence[str] = GOALS) -> None:
        super().__init__()
        self.goals = _check_goals("goals", goals)

    def candidates(self, caption: str, state: Mapping[str, Any] | None) -> list[str]:
        return list(self.goals)


def make_suggester(
    spec: str | Mapping[str, Any],
    /,
    *,
    connect_llm: Callable[[], Any] | None = None,
    llm_defaults: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Suggester:
    """The registered suggester that `spec` names: a name, or `{"name": ..., "kwargs": {...}}`;
    `kwargs` are added to the spec's own. One that calls a language model (`uses_llm`) also
    gets, where neither sets them, the gateway client `llm` from `connect_llm()` and
    `llm_defaults` (e.g. `run_id`). Unknown names and keyword arguments are refused with an
    error that names them and lists what is allowed."""
    if isinstance(spec, str):
        name, spec_kwargs = spec, {}
    elif isinstance(spec, Mapping) and "name" in spec:
        name, spec_kwargs = str(spec["name"]), dict(spec.get("kwargs") or {})
    else:
        expected = "a name or {'name': ..., 'kwargs': {...}}"
        raise ValueError(f"suggester: expected {expected}, got {spec!r}")
    try:
        suggester_cls = registry.get_suggester(name)
    except KeyError as exc:
        raise ValueError(f"suggester: {exc}") from None
    arguments = {**spec_kwargs, **kwargs}
    accepted = [p for p in inspect.signature(suggester_cls).parameters if p != "self"]
    unknown = sorted(set(arguments) - set(accepted))
    if unknown:
        raise ValueError(f"suggester {name!r}: unknown argument(s) {unknown}; accepted: {accepted}")
    if suggester_cls.uses_llm:
        if "llm" not in arguments and connect_llm is not None:
            arguments["llm"] = connect_llm()
        for key, value in (llm_defaults or {}).items():
            if key in accepted:
                arguments.setdefault(key, value)
    return suggester_cls(**arguments)
