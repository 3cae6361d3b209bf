"""Bounded numeric types shared by every request model and recipe config: a number a client
sends is refused at submission (422 naming the field) when it cannot be used, instead of
overflowing later in SQLite, numpy, a float conversion or a seeded RNG.

    class MyConfig(RecipeConfig):
        seed: Seed = Field(0, description="seed of episode 0")
        episodes: int = Field(20, ge=1, le=MAX_COUNT)

`BoundedModel` is the base of request models that want the rule everywhere: finite floats
and every integer (nested in dicts and lists too) within int64.

Settings that size a run (env steps, rollout length, batch size, hidden width, LoRA rank, tokens,
learning rate...) each have an upper limit of a named kind (`LIMIT_KINDS`): far above any real
run on a large machine, far below what exhausts one. An operator raises a kind's limit for a
bigger machine with `LLMRL_LIMIT_<KIND>` (e.g. `LLMRL_LIMIT_ROLLOUT_STEPS=65536`), read by
`limits()`; a field takes its kind as a validator, so the limit in force applies, not the one of
the day the class was defined:

    class MyConfig(RecipeConfig):
        frames: Annotated[int, limit("frames")] = Field(100_000, ge=1)

A value above the limit is refused (type `over_limit`) with the value, the limit and the
variable that raises it; the field's JSON schema states the limit in force as its `maximum`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from llmrl.common.json_limits import MAX_JSON_INT

MAX_INT64 = MAX_JSON_INT
# A seed plus an episode index or seed offset stays below 2**32: numpy's, SB3's and gym's limit.
MAX_SEED = 2**31 - 1
MAX_SEED_OFFSET = 2**30
# Episodes of one evaluation or collection (what the evaluate recipe has always allowed).
MAX_EPISODES = 100_000
# A count of episodes, steps, examples, items: more than a service could do anyway.
MAX_COUNT = 10**9
# A budget in USD: far above any spend, low enough that a sum or product stays exact.
MAX_USD = 1e9

Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
SeedOffset = Annotated[int, Field(ge=0, le=MAX_SEED_OFFSET)]
Offset = Annotated[int, Field(ge=0, le=MAX_INT64)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Usd = Annotated[float, Field(ge=0, le=MAX_USD, allow_inf_nan=False)]


# -- operator limits --------------------------------------------------------------------------
LIMIT_ENV_PREFIX = "LLMRL_LIMIT_"


@dataclasses.dataclass(frozen=True)
class LimitKind:
    """One kind of run setting with an upper limit: `default` unless $LLMRL_LIMIT_<NAME>."""

    name: str
    default: int | float
    what: str  # what the numbers count, for the refusal: "steps per env in one PPO rollout"

    @property
    def variable(self) -> str:
        return LIMIT_ENV_PREFIX + self.name.upper()


# Defaults: far above the settings of the papers the recipes reproduce and of any run on a
# large machine, far below what exhausts one's memory; where a service API had a fixed bound
# (the learner's lora_r 1024, learning_rate 1, max_length 65536), the limit is that bound. What
# they refuse: glam num_steps 10**12 (a 116 TiB rollout buffer), ellm hidden 10**12, kalm
# lora_r 10**9, llm-personalize max_tokens 10**18, each accepted before and failed at run time.
LIMIT_KINDS: dict[str, LimitKind] = {
    kind.name: kind
    for kind in (
        LimitKind("frames", 10**10, "env steps or frames: a budget, or an interval"),
        LimitKind("episode_steps", 10**6, "steps of one episode: a step cap, a plan's length"),
        LimitKind("rollout_steps", 32_768, "steps per env in one PPO rollout"),
        LimitKind("replay_buffer", 10**7, "transitions a replay buffer holds"),
        LimitKind("episodes", MAX_EPISODES, "episodes or rollouts of one collection or "
                  "evaluation"),
        LimitKind("batch", 65_536, "samples per gradient step of a policy or value network"),
        LimitKind("llm_batch", 1_024, "sequences per LLM training step or forward pass"),
        LimitKind("hidden", 16_384, "units of a hidden layer"),
        LimitKind("lora_rank", 1_024, "LoRA rank"),
        LimitKind("layers", 1_024, "decoder layers"),
        LimitKind("tokens", 65_536, "tokens of one answer or training example"),
        LimitKind("learning_rate", 1.0, "learning rate"),
        LimitKind("coefficient", 10_000.0, "loss coefficient, clip, scale, penalty or bonus"),
        LimitKind("epochs", 1_000, "epochs over the same data"),
        LimitKind("updates", 10**7, "optimizer steps or updates"),
        LimitKind("examples", 10**8, "training examples"),
    )
}  # fmt: skip


class LimitsError(ValueError):
    """A $LLMRL_LIMIT_<KIND> that is no positive number; names the variable."""


class Limits:
    """The upper limits in force, by kind: each kind's default, or its variable's value."""

    def __init__(self, values: Mapping[str, int | float]) -> None:
        self.values = dict(values)

    def __getitem__(self, kind: str) -> int | float:
        return self.values[kind]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Limits:
        """The limits the environment sets ($LLMRL_LIMIT_<KIND>), defaults for the others;
        LimitsError naming the variable when one is no positive number."""
        environ = os.environ if environ is None else environ
        values: dict[str, int | float] = {}
        for kind in LIMIT_KINDS.values():
            text = environ.get(kind.variable, "").strip()
            values[kind.name] = _parse_limit(kind, text) if text else kind.default
        return cls(values)


def _parse_limit(kind: LimitKind, text: str) -> int | float:
    integer = isinstance(kind.default, int)
    try:
        value: int | float = float(text.replace("_", ""))
        if integer and float(value).is_integer():
            value = int(text) if text.lstrip("+").isdigit() else int(value)
    except (ValueError, OverflowError):
        value = math.nan
    if not (math.isfinite(value) and value > 0) or (integer and not isinstance(value, int)):
        raise LimitsError(
            f"{kind.variable}: expected a positive {'integer' if integer else 'number'} (the "
            f"limit of {kind.what}), got {text[:40]!r}"
        )
    return value


_cached: tuple[tuple[str | None, ...], Limits] | None = None


def limits() -> Limits:
    """The limits of this process's environment (read again when a variable changes)."""
    global _cached
    key = tuple(os.environ.get(kind.variable) for kind in LIMIT_KINDS.values())
    cached = _cached
    if cached is None or cached[0] != key:
        cached = (key, Limits.from_env())
        _cached = cached
    return cached[1]


class _LimitCheck:
    """The validator of a kind: the value, unless above the kind's limit in force."""

    def __init__(self, kind: str) -> None:
        if kind not in LIMIT_KINDS:
            raise KeyError(f"unknown limit kind {kind!r}; kinds: {', '.join(LIMIT_KINDS)}")
        self.kind = kind

    def __call__(self, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return value  # None, a schedule: other validators' business
        kind = LIMIT_KINDS[self.kind]
        limit = limits()[self.kind]
        if value > limit:
            raise PydanticCustomError(
                "over_limit",
                "{value} is above the limit {limit} ({what}); an operator raises it with "
                "{variable}",
                {
                    "value": value,
                    "limit": limit,
                    "what": kind.what,
                    "kind": kind.name,
                    "variable": kind.variable,
                },
            )
        return value

    def __repr__(self) -> str:
        return f"limit({self.kind!r})"


@dataclasses.dataclass(frozen=True)
class Limit(AfterValidator):
    """The upper limit of kind `kind` as pydantic metadata (`limit(kind)`): an after-validator,
    and the limit in force as the JSON schema's `maximum`."""

    kind: str = ""

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        json_schema = handler(schema)
        limit = limits()[self.kind]
        # a nullable number (`int | None`): its number branch gets the maximum
        branches = json_schema.get("anyOf", [json_schema])
        for branch in branches:
            if branch.get("type") in ("integer", "number"):
                maximum = branch.get("maximum")
                branch["maximum"] = limit if maximum is None else min(maximum, limit)
        return json_schema


def limit(kind: str) -> Limit:
    """The metadata that bounds a field by the limit of `kind` (`LIMIT_KINDS`)."""
    return Limit(_LimitCheck(kind), kind)


def limit_of(metadata: Any) -> str | None:
    """The limit kind `metadata` (one item of a field's metadata) applies, else None."""
    return metadata.kind if isinstance(metadata, Limit) else None


# a field of each kind (bounds below are the field's own: `Field(8, gt=0)`); a nullable one is
# `Annotated[int | None, limit(kind)]`, so that fields copying its metadata get the limit too
Episodes = Annotated[int, Field(ge=1), limit("episodes")]
Frames = Annotated[int, limit("frames")]
EpisodeSteps = Annotated[int, limit("episode_steps")]
RolloutSteps = Annotated[int, limit("rollout_steps")]
BufferSize = Annotated[int, limit("replay_buffer")]
Batch = Annotated[int, limit("batch")]
LlmBatch = Annotated[int, limit("llm_batch")]
Hidden = Annotated[int, limit("hidden")]
LoraRank = Annotated[int, limit("lora_rank")]
Tokens = Annotated[int, limit("tokens")]
Epochs = Annotated[int, limit("epochs")]
Updates = Annotated[int, limit("updates")]
LearningRate = Annotated[float, limit("learning_rate")]
Coefficient = Annotated[float, limit("coefficient")]


def out_of_bounds(value: Any) -> str | None:
    """Why `value` (a number, or a dict or list holding numbers) breaks the common bounds:
    an integer beyond int64 or a float that is not finite; None if it does not."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, int) and not -MAX_INT64 <= item <= MAX_INT64:
            return f"integers must be at most {MAX_INT64} in magnitude"
        if isinstance(item, float) and not math.isfinite(item):
            return "numbers must be finite (no NaN or infinity)"
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return None


class BoundedModel(BaseModel):
    """A model whose every field holds finite floats and int64 integers, nested ones too."""

    model_config = ConfigDict(allow_inf_nan=False)

    @field_validator("*")
    @classmethod
    def _numbers_are_bounded(cls, value: Any) -> Any:
        reason = out_of_bounds(value)
        if reason is not None:
            raise ValueError(reason)
        return value
