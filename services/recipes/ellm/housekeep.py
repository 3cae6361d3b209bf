"""ELLM on Housekeep: the language model judges where objects belong, and suggests tidying.

Housekeep (`llmrl.simulator.envs.housekeep`) is a house of rooms, receptacles and objects, some
misplaced; the agent acts by skills ("pick up washcloth_1", "place washcloth_1 on sink_1"). As
in ELLM's Housekeep experiments the language model is asked, for an object and a receptacle,
a yes/no question ("Does a washcloth belong on the sink in the bathroom?"): `PlacementJudge`
scores "yes" and "no" as the answer through the gateway `score` and renormalises, P(yes) =
p(yes) / (p(yes) + p(no)) (both capitalisations counted), cached per (object kind, receptacle
kind, room kind). The suggester `housekeep-llm` then proposes, from what the agent knows of the
house (the env's `known_house`):

* "pick up X" for each found object X on a receptacle where P(yes) < `threshold` (misplaced in
  the model's judgement), when the hand is empty;
* "place X on Y" for the held object X and each found receptacle Y with P(yes) >= `threshold`.

`housekeep-oracle` makes the same suggestions from the true placements (the env's privileged
`correct_receptacles`): the upper bound the judge is measured against. `transition_caption`
says what a step did, in the same words ("pick up X", "place X on Y", "" otherwise), from the
`known_house` before and after it, so `SuggestionReward` applies unchanged.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from llmrl.common.registry import registry
from llmrl.recipes.ellm.reward import check_threshold
from llmrl.recipes.ellm.suggesters import MAX_CONCURRENT_QUERIES, Suggester

YES = ("yes", "Yes")
NO = ("no", "No")
SYSTEM = (
    "You help tidy a house. Answer each question with yes or no: would most people keep this "
    "object on this receptacle?"
)


def kind(name: str) -> str:
    """`bottom_cabinet_7` -> "bottom cabinet" (the words a model understands)."""
    return re.sub(r"_\d+$", "", name).replace("_", " ")


def placement_question(obj: str, receptacle: str, room: str | None) -> str:
    where = f" in the {kind(room)}" if room else ""
    article = "an" if kind(obj)[:1] in "aeiou" else "a"
    return f"Does {article} {kind(obj)} belong on the {kind(receptacle)}{where}?"


class PlacementJudge:
    """P(yes) that an object belongs on a receptacle, from the gateway `score` (module
    docstring); answers are cached by kinds, and a batch of new pairs is asked concurrently."""

    def __init__(
        self,
        llm: Any,
        model: str | None = None,
        run_id: str = "default",
        tag: str = "ellm/housekeep-judge",
        timeout_s: float | None = None,
    ) -> None:
        if llm is None:
            raise ValueError("llm: the judge needs a gateway client (connect_llm)")
        self.llm = llm
        self.model = model
        self.run_id = run_id
        self.tag = tag
        self.timeout_s = timeout_s  # per gateway call (None: the gateway's default)
        self._cache: dict[tuple[str, str, str], float] = {}
        self.asked = 0
        self.gateway_cache_hits = 0

    def _key(self, obj: str, receptacle: str, room: str | None) -> tuple[str, str, str]:
        return kind(obj), kind(receptacle), kind(room) if room else ""

    def _ask(self, key: tuple[str, str, str]) -> float:
        obj, receptacle, room = key
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": placement_question(obj, receptacle, room or None)},
        ]
        result = self.llm.score(
            messages,
            [*YES, *NO],
            model=self.model,
            run_id=self.run_id,
            tag=self.tag,
            timeout_s=self.timeout_s,
        )
        self.asked += 1
        self.gateway_cache_hits += int(bool(result.cached))
        top = max(result.logprobs)
        weights = [math.exp(value - top) for value in result.logprobs]
        yes = sum(weights[: len(YES)])
        return yes / (yes + sum(weights[len(YES) :]))

    def p_yes(self, pairs: Sequence[tuple[str, str, str | None]]) -> list[float]:
        """P(yes) for each (object, receptacle, room) pair (names as the house has them)."""
        keys = [self._key(*pair) for pair in pairs]
        new = [key for key in dict.fromkeys(keys) if key not in self._cache]
        if new:
            with ThreadPoolExecutor(min(len(new), MAX_CONCURRENT_QUERIES)) as pool:
                for key, value in zip(new, pool.map(self._ask, new), strict=True):
                    self._cache[key] = value
        return [self._cache[key] for key in keys]


def known_house(state: Mapping[str, Any] | None) -> dict[str, Any]:
    """The env's `known_house` entry of `state`, parsed."""
    if state is None or "known_house" not in state:
        raise ValueError("state: a Housekeep suggester needs the env's 'known_house' entry")
    value = state["known_house"]
    value = value.item() if hasattr(value, "item") else value
    return json.loads(value) if isinstance(value, str) else dict(value)


def transition_caption(before: str | Mapping[str, Any], after: str | Mapping[str, Any]) -> str:
    """What a Housekeep step did ("pick up X", "place X on Y", or ""), from the `known_house`
    states (JSON or dicts) before and after it."""
    if isinstance(before, str) and before == after:  # most steps: nothing known changed
        return ""
    old, new = known_house({"known_house": before}), known_house({"known_house": after})
    if old["held"] is None and new["held"] is not None:
        return f"pick up {new['held']}"
    if old["held"] is not None and new["held"] is None and old["held"] in new["objects"]:
        return f"place {old['held']} on {new['objects'][old['held']]}"
    return ""


class HousekeepSuggester(Suggester):
    """Tidying suggestions from a judgement of which placements are right (module docstring)."""

    def belongs(
        self, pairs: list[tuple[str, str, str | None]], state: Mapping[str, Any]
    ) -> list[bool]:
        raise NotImplementedError

    def candidates(self, caption: str, state: Mapping[str, Any] | None) -> list[str]:
        house = known_house(state)
        receptacles: dict[str, str] = house["receptacles"]
        if house["held"] is None:
            objects = list(house["objects"].items())
            pairs = [(obj, rec, receptacles.get(rec)) for obj, rec in objects]
            fits = self.belongs(pairs, state) if pairs else []
            return [
                f"pick up {obj}" for (obj, _), fit in zip(objects, fits, strict=True) if not fit
            ]
        held = house["held"]
        pairs = [(held, rec, room) for rec, room in receptacles.items()]
        fits = self.belongs(pairs, state) if pairs else []
        return [
            f"place {held} on {rec}" for (_, rec, _), fit in zip(pairs, fits, strict=True) if fit
        ]


@registry.register_suggester(
    "housekeep-llm", "ELLM on Housekeep: the LLM's yes/no judgement of object-receptacle pairs"
)
class HousekeepLlmSuggester(HousekeepSuggester):
    """ "pick up X" / "place X on Y" from P(yes) of the language model (module docstring);
    `suggest` needs `state=` with the env's `known_house`.

    Keyword arguments: `llm` the gateway client; `model` (None: the gateway's default);
    `run_id`, `tag` what the calls are billed to; `threshold` the P(yes) at which an object
    belongs on a receptacle (0.5), in [0, 1].
    """

    uses_llm = True

    def __init__(
        self,
        llm: Any = None,
        model: str | None = None,
        run_id: str = "default",
        tag: str = "ellm/housekeep-judge",
        threshold: float = 0.5,
    ) -> None:
        super().__init__()
        self.threshold = check_threshold(threshold)
        self.judge = PlacementJudge(llm, model, run_id, tag)

    def belongs(
        self, pairs: list[tuple[str, str, str | None]], state: Mapping[str, Any]
    ) -> list[bool]:
        asked = self.judge.asked
        values = self.judge.p_yes(pairs)
        self._count("asked", self.judge.asked - asked)
        self._count("cache_hits", len(pairs) - (self.judge.asked - asked))
        return [value >= self.threshold for value in values]

    def counters(self) -> dict[str, int]:
        counters = super().counters()
        counters["gateway_cache_hits"] = self.judge.gateway_cache_hits
        return counters


@registry.register_suggester(
    "housekeep-oracle", "Housekeep: tidying suggestions from the true placements (privileged)"
)
class HousekeepOracleSuggester(HousekeepSuggester):
    """The same suggestions from the truth: `state` needs `known_house` and the privileged
    `correct_receptacles` (JSON: object -> its correct receptacles). No keyword arguments."""

    def belongs(
        self, pairs: list[tuple[str, str, str | None]], state: Mapping[str, Any]
    ) -> list[bool]:
        value = state.get("correct_receptacles")
        if value is None:
            raise ValueError("state: the oracle needs the env's 'correct_receptacles' entry")
        value = value.item() if hasattr(value, "item") else value
        correct = json.loads(value) if isinstance(value, str) else dict(value)
        return [rec in correct.get(obj, ()) for obj, rec, _ in pairs]
