"""Experiments: a named set of runs (recipes × a grid of config values × seeds), planned up front.

    {"name": "w2a-planners", "recipe": "when2ask", "config": {"train_steps": 5000},
     "grid": {"planner": ["oracle", "local"]}, "seeds": "0..4", "max_parallel": 2}

is ten runs: each one's config is the base `config` + one grid point + `seed`. `recipe` may
instead be a list of {recipe, config} entries (several recipes, or one recipe in several
fixed variants), each crossed with the grid and the seeds.

Planning validates everything before anything starts: the cap on runs
(LLMRL_MAX_EXPERIMENT_RUNS), grid keys the recipes know, non-empty axes, the seed range and
every run's full config. A bad spec raises ConfigError naming the field (a 422 from the
REST API, a usage error from the CLI).

Run ids derive from the experiment id, the run's recipe and grid point and its seed, so
planning the same experiment again gives the same runs: that is what makes an embedded sweep
resumable (completed runs are skipped, an interrupted one resumes).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from llmrl.common.bounds import MAX_SEED, Seed
from llmrl.common.config import deep_merged, env_int, nested
from llmrl.recipes.config import ConfigError, recipe_class, validate_config
from llmrl.recipes.tracking import identity

MAX_RUNS_VAR = "LLMRL_MAX_EXPERIMENT_RUNS"
DEFAULT_MAX_RUNS = 256
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
SEED_RANGE = re.compile(r"^\s*(\d+)\s*\.\.\s*(\d+)\s*$")


class RecipeEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    recipe: str = Field(description="A registered recipe (`llmrl recipes`, GET /recipes).")
    config: dict[str, Any] = Field(
        default_factory=dict, description="Config of this entry, over the experiment's base."
    )


class ExperimentSpec(BaseModel):
    """What POST /experiments takes and `llmrl sweep` builds from its arguments."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(
        None,
        pattern=NAME_PATTERN,
        description="Label of the experiment (letters, digits, '.', '_', '-'); default: the "
        "recipe and a digest of the spec.",
    )
    recipe: str | list[RecipeEntry] = Field(
        description="A registered recipe, or a list of {recipe, config} entries."
    )
    config: dict[str, Any] = Field(
        default_factory=dict, description="Base config shared by every run."
    )
    grid: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="Config key → values; every combination is a grid point (method).",
    )
    seeds: list[Seed] = Field(
        default_factory=lambda: [0],
        description="Seeds of every grid point: a list, or an inclusive range 'a..b'.",
    )
    max_parallel: int = Field(
        2, ge=1, le=256, description="Runs at once in service mode (embedded: one at a time)."
    )

    @field_validator("seeds", mode="before")
    @classmethod
    def _parse_seeds(cls, value: Any) -> Any:
        return parse_seeds(value)

    @field_validator("seeds")
    @classmethod
    def _seeds_are_distinct(cls, value: list[int]) -> list[int]:
        if not value:
            raise ValueError("seeds is empty: give a range 'a..b' or a list of seeds")
        if len(set(value)) != len(value):
            raise ValueError(f"seeds repeat a seed: {value}")
        if min(value) < 0:
            raise ValueError(f"seeds must be >= 0, got {value}")
        return value

    @field_validator("grid")
    @classmethod
    def _axes_are_values(cls, value: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in value.items():
            if key == "seed":
                raise ValueError("grid.seed: give seeds in `seeds`, not as a grid axis")
            if not values:
                raise ValueError(f"grid.{key} is an empty axis: give it at least one value")
        return value

    def entries(self) -> list[RecipeEntry]:
        if isinstance(self.recipe, str):
            return [RecipeEntry(recipe=self.recipe)]
        if not self.recipe:
            raise ConfigError("recipe: the list of recipes is empty", _errors(["recipe"], "empty"))
        return self.recipe

    def recipes(self) -> list[str]:
        return list(dict.fromkeys(entry.recipe for entry in self.entries()))

    def points(self) -> list[dict[str, Any]]:
        """Every grid point, in the order the axes and their values were given."""
        keys = list(self.grid)
        return [
            dict(zip(keys, values, strict=True))
            for values in itertools.product(*(self.grid[key] for key in keys))
        ]

    def size(self) -> int:
        return len(self.entries()) * math.prod(len(v) for v in self.grid.values()) * len(self.seeds)

    def default_name(self) -> str:
        """The recipe(s) and a digest of what defines the runs (not name or max_parallel)."""
        return f"{'+'.join(self.recipes())}-{digest(self.identity())[:6]}"

    def identity(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"name", "max_parallel"})


def parse_seeds(value: Any) -> Any:
    """'0..4' → [0, 1, 2, 3, 4] (inclusive); 7 → [7]; a list is kept; anything else is an error."""
    if isinstance(value, bool):
        raise ValueError(f"seeds must be a range 'a..b' or a list of integers, got {value!r}")
    if isinstance(value, int):
        return [value]
    if isinstance(value, str):
        match = SEED_RANGE.match(value)
        if match is None:
            raise ValueError(
                f"seeds {value!r} is not a range: write 'a..b' (inclusive, e.g. 0..4) "
                "or a list [0,3,7]"
            )
        low, high = int(match.group(1)), int(match.group(2))
        if high < low:
            raise ValueError(f"seeds {value!r} is an empty range: {high} < {low}")
        if high > MAX_SEED or high - low >= max_runs():  # checked before the list is built
            raise ValueError(
                f"seeds {value!r}: seeds are at most {MAX_SEED} and a range at most "
                f"{max_runs()} long ({MAX_RUNS_VAR})"
            )
        return list(range(low, high + 1))
    return value


@dataclass(frozen=True)
class PlannedRun:
    run_id: str
    recipe: str
    config: dict[str, Any]  # the full, validated config (base + entry + point + seed)
    point: dict[str, Any]  # what distinguishes this run's method: entry config + grid point
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "recipe": self.recipe,
            "config": self.config,
            "point": self.point,
            "seed": self.seed,
        }


def digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def max_runs() -> int:
    return env_int(MAX_RUNS_VAR, DEFAULT_MAX_RUNS)


def new_experiment_id(spec: ExperimentSpec) -> str:
    """A fresh id for the orchestrator (each POST is a new experiment)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return f"{spec.name or spec.default_name()}-{stamp}-{uuid.uuid4().hex[:6]}"


def parse_spec(data: Any) -> ExperimentSpec:
    """The spec from JSON-like data; ConfigError naming each bad field."""
    try:
        return ExperimentSpec.model_validate(data)
    except ValidationError as exc:
        errors = [
            {"loc": list(map(str, err["loc"])), "msg": err["msg"], "type": err["type"]}
            for err in exc.errors(include_url=False)
        ]
        lines = [f"{'.'.join(e['loc']) or 'experiment'}: {e['msg']}" for e in errors]
        raise ConfigError("invalid experiment: " + "; ".join(lines), errors) from None


def spec_from_arguments(
    recipe: str,
    arguments: Sequence[str],
    name: str | None = None,
    max_parallel: int | None = None,
) -> ExperimentSpec:
    """`llmrl sweep RECIPE key=value ...`: a top-level `key=[a,b]` is a grid axis (a
    list-valued key as one fixed value: `key=[[a,b]]`), `seeds=a..b` or `seeds=[..]` the
    seeds, anything else the base config."""
    data = {"recipe": recipe, **split_arguments(arguments)}
    if name is not None:
        data["name"] = name
    if max_parallel is not None:
        data["max_parallel"] = max_parallel
    return parse_spec(data)


def run_config(
    base: dict[str, Any], entry: dict[str, Any], point: dict[str, Any], seed: int
) -> dict[str, Any]:
    """One run's config: the entry's config over the base, then the grid point (a dotted
    axis, `ppo.learning_rate`, sets that key of its group), then the seed; groups merge key
    by key, as `key=value` overrides do."""
    config = deep_merged(base, entry)
    for key, value in point.items():
        config = deep_merged(config, nested(key, value))
    return {**config, "seed": seed}


def split_arguments(arguments: Sequence[str]) -> dict[str, Any]:
    """`key=value` arguments as an experiment's `config`, `grid` and (when given) `seeds`: a
    `key=[a,b]` is a grid axis (`key=[[a,b]]` one list value; a group's key too:
    `ppo.learning_rate=[1e-3,1e-4]`), `seeds=a..b` or `seeds=[..]` the seeds, anything else
    the base config."""
    from llmrl.common.config import parse_overrides

    config: dict[str, Any] = {}
    grid: dict[str, list[Any]] = {}
    data: dict[str, Any] = {"config": config, "grid": grid}
    for pair in arguments:
        key, _, raw = pair.partition("=")
        try:
            ((parsed_key, value),) = parse_overrides([pair]).items()
        except ValueError as exc:
            raise ConfigError(f"{pair!r}: {exc}", _errors(["config"], str(exc))) from None
        leaf = value
        while isinstance(leaf, dict) and len(leaf) == 1:  # ppo.learning_rate=[...]: its list
            (leaf,) = leaf.values()
        if key.strip() == "seeds":
            data["seeds"] = value if isinstance(value, list | int) else raw.strip()
        elif isinstance(value, list):
            grid[parsed_key] = value
        elif "." in key and isinstance(leaf, list):  # a grid axis of a group's key
            grid[key.strip()] = leaf
        elif isinstance(value, dict) and isinstance(config.get(parsed_key), dict):
            config[parsed_key].update(value)
        else:
            config[parsed_key] = value
    return data


def plan_experiment(
    spec: ExperimentSpec, experiment_id: str, cap: int | None = None
) -> list[PlannedRun]:
    """Every run of the experiment with its validated config; ConfigError if any is bad."""
    cap = max_runs() if cap is None else cap
    total = spec.size()
    if total > cap:
        shape = " × ".join(
            [f"{len(spec.entries())} recipe entries"] * (len(spec.entries()) > 1)
            + [f"{len(v)} {k}" for k, v in spec.grid.items()]
            + [f"{len(spec.seeds)} seeds"]
        )
        message = (
            f"grid × seeds: the experiment has {total} runs ({shape}), more than the cap of "
            f"{cap} ({MAX_RUNS_VAR}); use fewer grid values or seeds"
        )
        raise ConfigError(message, _errors(["grid"], message))
    entries = spec.entries()
    for entry in entries:
        config_model = recipe_class(entry.recipe).Config  # unknown recipe: ConfigError
        keys = config_model.model_fields
        for key in [*spec.grid, *entry.config, *spec.config]:
            key = key.split(".")[0]  # a grid axis of a group's key: ppo.learning_rate
            if key == "seed" and key not in spec.grid:
                where = "config" if key in spec.config else "recipe.config"
                message = f"{where}.seed: give seeds in `seeds`, not in a config"
                raise ConfigError(message, _errors([where, "seed"], message))
            if key not in keys:
                where = "grid" if key in spec.grid else "config"
                message = (
                    f"{where}.{key}: {config_model.unknown_key_message(key)} in recipe "
                    f"{entry.recipe!r}; "
                    f"keys: {', '.join(keys)}"
                )
                raise ConfigError(message, _errors([where, key], message))
    planned: list[PlannedRun] = []
    several_recipes = len(spec.recipes()) > 1
    for entry in entries:
        for point in spec.points():
            label = {"recipe": entry.recipe} if several_recipes else {}
            label.update({**entry.config, **point} if len(entries) > 1 else point)
            # where a run reports (tracking) is no part of its id: a file that adds it keeps
            # its run ids, its out dirs' resumes and its kept reports
            method_digest = digest([entry.recipe, identity(entry.config), identity(point)])[:8]
            for seed in spec.seeds:
                config = run_config(spec.config, entry.config, point, seed)
                try:
                    validated = validate_config(entry.recipe, config)
                except ConfigError as exc:
                    where = ", ".join(f"{k}={v!r}" for k, v in label.items()) or "base config"
                    raise ConfigError(
                        f"{exc} (grid point {where}, seed {seed})", exc.errors
                    ) from None
                planned.append(
                    PlannedRun(
                        run_id=f"{experiment_id}-{method_digest}-s{seed}",
                        recipe=entry.recipe,
                        config=validated.model_dump(mode="json"),
                        point=label,
                        seed=seed,
                    )
                )
    return planned


def _errors(loc: list[str], message: str) -> list[dict[str, Any]]:
    return [{"loc": loc, "msg": message}]
