"""A recipe's config: the base model every recipe's config extends, the checks its keys share
(paths confined, envs registered), and validation of a submitted config (`validate_config`,
`ConfigError` naming each bad key) with the schemas clients read."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, ValidationError

from llmrl.common.bounds import BoundedModel
from llmrl.common.memory_fit import MemoryEstimate, OverMemoryError, check_fits
from llmrl.common.model_fields import owner_model
from llmrl.common.registry import registry
from llmrl.recipes.tracking import (
    TRACKERS,
    TrackerName,
    WandbMode,
    checked_trackers,
    checked_tracking_uri,
    tracker_list,
)

if TYPE_CHECKING:
    from llmrl.recipes.base import Recipe


class RecipeConfig(BoundedModel):
    """Base of every recipe's config: unknown keys are errors, field descriptions are docs,
    numbers are finite and int64 (seeds take `llmrl.common.bounds.Seed`)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # where the run reports (`llmrl.recipes.tracking`): every recipe has these
    tracking: Annotated[
        list[TrackerName], BeforeValidator(tracker_list), AfterValidator(checked_trackers)
    ] = Field(
        default_factory=lambda: ["tensorboard"],
        max_length=len(TRACKERS),
        description="where the run's scalars, settings, results and plots go, like TRL's "
        f"report_to: any of {', '.join(TRACKERS)} (a list, or `tracking=mlflow,wandb` on the "
        "command line), or none; mlflow and wandb need `pip install 'llmrl[tracking]'`",
    )
    mlflow_tracking_uri: Annotated[str | None, AfterValidator(checked_tracking_uri)] = Field(
        None,
        max_length=2048,
        description="MLflow tracking server or store (http://host:5000, sqlite:///path.db); "
        "None: $MLFLOW_TRACKING_URI, else a SQLite store in the run's out dir (mlflow.db). A "
        "server must be one the operator allows ($LLMRL_TRACKING_SERVERS or "
        "$MLFLOW_TRACKING_URI), a store must lie under the folders the service may write",
    )
    mlflow_experiment: str | None = Field(
        None,
        min_length=1,
        max_length=500,
        description="MLflow experiment (None: the recipe's name)",
    )
    wandb_project: str = Field(
        "llmrl", min_length=1, max_length=128, description="Weights & Biases project"
    )
    wandb_mode: WandbMode | None = Field(
        None,
        description="Weights & Biases mode: offline (files in <out>/wandb, `wandb sync` uploads "
        "them), online or disabled; None: $WANDB_MODE, else offline",
    )

    @classmethod
    def unknown_key_message(cls, key: str) -> str:
        """What to say of `key`, which the config does not have (a config whose keys moved
        says where to)."""
        return "unknown config key"

    def memory_estimate(self) -> MemoryEstimate | None:
        """The run's estimated peak memory where it could exceed a machine's (checked at
        submission: `llmrl.common.memory_fit`); None: too small to matter, or not known."""
        return None


# a keyword argument that names a file or folder: data_dir, scene_file, *_path, cache_root...
PATH_KWARG = re.compile(r"(^|_)(dir|dirs|path|paths|file|files|folder|root|roots)$")


def confined_kwargs(value: dict[str, Any], field: str) -> dict[str, Any]:
    """`value` (an env's or a planner's keyword arguments) when each path among them (the
    str, or list of str, of a key that names a file or folder: `PATH_KWARG`) lies under the
    folders a service may use (`llmrl.common.paths.confine`); else the ValueError naming
    `<field>.<key>` and the path as given."""
    from llmrl.common.paths import confine

    for key, item in value.items():
        if not isinstance(key, str) or not PATH_KWARG.search(key):
            continue
        for path in [item] if isinstance(item, str) else item if isinstance(item, list) else []:
            if isinstance(path, str) and path:
                confine(path, f"{field}.{key}")
    return value


def check_planner_model(kwargs: dict[str, Any], field: str = "planner_kwargs") -> None:
    """A planner's `model` keyword is a gateway model name, never a path or a URL."""
    from llmrl.common.names import check_model_name

    model = kwargs.get("model")
    if isinstance(model, str):
        try:
            check_model_name(model)
        except ValueError as exc:
            raise ValueError(f"{field}.model: {exc}") from None


def registered_env(value: str, tag: str | None = None, needs: str = "") -> str:
    """A config's `env` value, checked against the registry (plugins loaded first); with
    `tag`, it must also be an env registered with that tag (`needs`: what the tag promises,
    for the error)."""
    from llmrl.common.plugins import load_plugins

    load_plugins()
    names = registry.names("env")
    if value not in names:
        raise ValueError(f"unknown env {value!r}; registered envs: {', '.join(sorted(names))}")
    if tag is not None:
        tagged = sorted(
            n for n in names if tag in registry.entry("env", n).metadata.get("tags", ())
        )
        if value not in tagged:
            raise ValueError(
                f"{value!r} is not an env this recipe plays ({needs}; registered with tag "
                f"{tag!r}): {', '.join(tagged)}"
            )
    return value


class ConfigError(ValueError):
    """A recipe name or config the recipe does not accept; the message says what and why."""

    def __init__(self, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []


def recipe_class(name: str) -> type[Recipe]:
    from llmrl.common.registry import UnavailableError, UnknownNameError

    try:
        return registry.get_recipe(name)
    except (UnknownNameError, UnavailableError) as exc:
        raise ConfigError(str(exc), [{"loc": ["recipe"], "msg": str(exc)}]) from None


def _unknown_key_message(config: type[RecipeConfig], loc: tuple[Any, ...]) -> str:
    """What to say of a key at `loc` the config lacks: at the top level, the config's word
    on it (a key may have moved into a group); in a settings group, the group's keys."""
    if len(loc) == 1:
        return config.unknown_key_message(str(loc[0]))
    owner = owner_model(config, loc)
    if owner is None:
        return "unknown key"
    return f"unknown key; {'.'.join(map(str, loc[:-1]))}'s keys: {', '.join(owner.model_fields)}"


def validate_config(recipe: str, config: dict[str, Any] | None) -> RecipeConfig:
    """The recipe's config model built from `config`; ConfigError names each bad field."""
    if config is not None and not isinstance(config, dict):
        kind = type(config).__name__
        raise ConfigError(f"config must be a mapping of keys to values, got {kind}")
    cls = recipe_class(recipe)
    try:
        validated = cls.Config(**(config or {}))
    except ValidationError as exc:
        errors = [
            {
                "loc": ["config", *map(str, err["loc"])],
                # a key the config lacks may have moved or been renamed: the config says where
                "msg": _unknown_key_message(cls.Config, err["loc"])
                if err["type"] == "extra_forbidden"
                else err["msg"],
                "type": err["type"],
            }
            for err in exc.errors(include_url=False)
        ]
        allowed = ", ".join(cls.Config.model_fields)
        lines = [f"{'.'.join(e['loc'])}: {e['msg']}" for e in errors]
        raise ConfigError(
            f"invalid config for recipe {recipe!r}: " + "; ".join(lines) + f" (keys: {allowed})",
            errors,
        ) from None
    try:
        check_fits(validated.memory_estimate())
    except OverMemoryError as exc:
        loc = ["config", *exc.setting.split(".")]  # a group's key: ppo.microbatch_size
        error = {"loc": loc, "msg": str(exc), "type": "over_memory"}
        raise ConfigError(f"config.{exc.setting}: {exc}", [error]) from None
    except ValueError as exc:  # the operator's $LLMRL_LIMIT_MEMORY_GIB is no number: say so
        error = {"loc": ["config"], "msg": str(exc), "type": "memory_limit"}
        raise ConfigError(f"this server's memory limit is unusable: {exc}", [error]) from None
    return validated


def config_fields(recipe: str) -> list[dict[str, str]]:
    """The recipe's config keys: name, type, default and description (for `llmrl recipes`)."""
    from llmrl.common.model_fields import field_rows

    return field_rows(recipe_class(recipe).Config)


def recipe_schemas() -> dict[str, dict[str, Any]]:
    """Every registered recipe with its description and its config's JSON schema."""
    return {
        name: {
            "name": name,
            "description": entry.description,
            "config_schema": entry.obj.Config.model_json_schema(),
        }
        for name, entry in registry.entries("recipe").items()
    }
