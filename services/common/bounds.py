"""Bounded numeric types shared by every request model and recipe config: a number a client
sends is refused at submission (422 naming the field) when it cannot be used, instead of
overflowing later in SQLite, numpy, a float conversion or a seeded RNG.

    class MyConfig(RecipeConfig):
        seed: Seed = Field(0, description="seed of episode 0")
        episodes: int = Field(20, ge=1, le=MAX_COUNT)

`BoundedModel` is the base of request models that want the rule everywhere: finite floats
and every integer (nested in dicts and lists too) within int64.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

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
Episodes = Annotated[int, Field(ge=1, le=MAX_EPISODES)]
SeedOffset = Annotated[int, Field(ge=0, le=MAX_SEED_OFFSET)]
Offset = Annotated[int, Field(ge=0, le=MAX_INT64)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Usd = Annotated[float, Field(ge=0, le=MAX_USD, allow_inf_nan=False)]


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
