"""Every numeric setting of every recipe has an upper bound past which no real run goes, so an
absurd value is refused when a run is submitted instead of failing at run time (a 116 TiB
rollout buffer, a 10**12-wide layer): a static `le`/`lt`, or the limit of a named kind
(`llmrl.common.bounds.limit`) an operator raises with $LLMRL_LIMIT_<KIND>. The walk below fails
on any int/float field without one, nested settings models included, so that a new setting
cannot come in unbounded."""

from __future__ import annotations

import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from annotated_types import Le, Lt
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from starlette.testclient import TestClient

from llmrl.common.bounds import LIMIT_KINDS, Limits, LimitsError, limit_of, limits
from llmrl.common.registry import registry
from llmrl.recipes.config import ConfigError, validate_config

RECIPES = ("ellm", "evaluate", "glam", "grpo", "kalm", "llm-personalize", "when2ask")
NUMBERS = (int, float)


def config_model(recipe: str) -> type[BaseModel]:
    registry.load_builtins("recipe")
    return registry.get_recipe(recipe).Config


def metadata_of(annotation: Any, found: list[Any]) -> None:
    """Every metadata item in `annotation` (Annotated arguments anywhere in it, and the
    metadata of FieldInfo objects among them)."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        for item in args[1:]:
            found.append(item)
            if isinstance(item, FieldInfo):
                found.extend(item.metadata)
        metadata_of(args[0], found)
        return
    for arg in args:
        metadata_of(arg, found)


def leaf_types(annotation: Any) -> Iterator[Any]:
    """The plain types `annotation` is made of (through unions, Annotated and containers)."""
    args = typing.get_args(annotation)
    if not args:
        yield annotation
        return
    if typing.get_origin(annotation) is typing.Literal:
        return
    if typing.get_origin(annotation) is typing.Annotated:
        yield from leaf_types(args[0])
        return
    for arg in args:
        if arg is not Ellipsis:
            yield from leaf_types(arg)


def has_upper_bound(field: FieldInfo) -> bool:
    metadata = list(field.metadata)
    metadata_of(field.annotation, metadata)
    return any(isinstance(m, Le | Lt) or limit_of(m) is not None for m in metadata)


def numeric_settings(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, number type) of every int/float field of `model`, nested models too."""
    for name, field in model.model_fields.items():
        kinds = [t for t in leaf_types(field.annotation) if isinstance(t, type)]
        for kind in kinds:
            if issubclass(kind, BaseModel):
                yield from numeric_settings(kind, f"{prefix}{name}.")
        numbers = [k for k in kinds if k in NUMBERS]
        if numbers:
            yield f"{prefix}{name}", field, numbers[0]


def test_every_numeric_setting_of_every_recipe_has_an_upper_bound():
    config_model(RECIPES[0])  # the built-in recipes registered
    # a recipe added later to llmrl is walked too; the tests' own stand-ins (registered when
    # their modules load in the same session) are not product settings
    recipes = [
        name
        for name in registry.names("recipe")
        if registry.get_recipe(name).__module__.startswith("llmrl.")
    ]
    assert set(RECIPES) <= set(recipes)
    unbounded = [
        f"{recipe}: {path}"
        for recipe in recipes
        for path, field, _ in numeric_settings(config_model(recipe))
        if not has_upper_bound(field)
    ]
    assert not unbounded, "numeric settings without an upper bound (le/lt or limit):\n" + (
        "\n".join(unbounded)
    )


def nested(path: str, value: Any) -> dict[str, Any]:
    head, _, rest = path.partition(".")
    return {head: nested(rest, value) if rest else value}


@pytest.mark.parametrize("recipe", RECIPES)
def test_an_absurd_value_of_every_numeric_setting_is_refused_naming_it(recipe):
    """The bound is applied, not only declared: 10**15 (1e15) is refused naming the setting."""
    settings = list(numeric_settings(config_model(recipe)))
    assert settings
    for path, _, number in settings:
        value = 10**15 if number is int else 1e15
        with pytest.raises(ConfigError) as refused:
            validate_config(recipe, nested(path, value))
        locs = [".".join(e["loc"][1:]) for e in refused.value.errors]
        assert path in locs, (recipe, path, str(refused.value)[:500])


# -- the four values an independent probe submitted (each failed only at run time) ----------
MEASURED = [
    ("glam", {"ppo": {"num_steps": 10**12}}, "ppo.num_steps", "LLMRL_LIMIT_ROLLOUT_STEPS"),
    ("ellm", {"hidden": 10**12}, "hidden", "LLMRL_LIMIT_HIDDEN"),
    ("kalm", {"lora_r": 10**9}, "lora_r", "LLMRL_LIMIT_LORA_RANK"),
    ("llm-personalize", {"max_tokens": 10**18}, "max_tokens", "LLMRL_LIMIT_TOKENS"),
]


@pytest.mark.parametrize(("recipe", "config", "field", "variable"), MEASURED)
def test_the_measured_absurd_values_are_refused_naming_field_and_variable(
    recipe, config, field, variable
):
    with pytest.raises(ConfigError) as refused:
        validate_config(recipe, config)
    message = str(refused.value)
    value = config
    for part in field.split("."):  # a group's key: ppo.num_steps
        value = value[part]
    assert f"config.{field}: {value} is above the limit" in message, message
    assert variable in message, message
    error = next(e for e in refused.value.errors if e["loc"] == ["config", *field.split(".")])
    assert error["type"] == "over_limit"


def test_an_operator_raises_a_limit_with_its_variable(monkeypatch):
    with pytest.raises(ConfigError):
        validate_config("kalm", {"lora_r": 2048})
    monkeypatch.setenv("LLMRL_LIMIT_LORA_RANK", "4096")
    assert validate_config("kalm", {"lora_r": 2048}).lora_r == 2048
    with pytest.raises(ConfigError) as refused:
        validate_config("kalm", {"lora_r": 4097})
    assert "4097 is above the limit 4096" in str(refused.value)
    # and the schema a client reads states the limit in force
    schema = config_model("kalm").model_json_schema()
    assert schema["properties"]["lora_r"]["maximum"] == 4096


def test_a_limit_variable_that_is_no_positive_number_is_refused_naming_it(monkeypatch):
    for text in ("abc", "0", "-5", "1.5", "inf"):
        with pytest.raises(LimitsError, match="LLMRL_LIMIT_ROLLOUT_STEPS"):
            Limits.from_env({"LLMRL_LIMIT_ROLLOUT_STEPS": text})
    assert Limits.from_env({"LLMRL_LIMIT_ROLLOUT_STEPS": "1e6"})["rollout_steps"] == 10**6
    assert Limits.from_env({"LLMRL_LIMIT_LEARNING_RATE": "2.5"})["learning_rate"] == 2.5
    monkeypatch.setenv("LLMRL_LIMIT_HIDDEN", "lots")
    with pytest.raises(ConfigError, match="LLMRL_LIMIT_HIDDEN"):
        validate_config("ellm", {"hidden": 64})


def test_every_limit_default_is_far_below_int64_and_has_its_variable():
    defaults = limits()
    for kind in LIMIT_KINDS.values():
        assert 0 < defaults[kind.name] < 2**53, kind
        assert kind.variable == f"LLMRL_LIMIT_{kind.name.upper()}"


# -- through the orchestrator's REST API ------------------------------------------------------
@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[TestClient]:
    from support.service_apps import orchestrator_app

    with TestClient(orchestrator_app(tmp_path), raise_server_exceptions=False) as client:
        yield client


@pytest.mark.parametrize(("recipe", "config", "field", "variable"), MEASURED)
def test_post_runs_refuses_the_measured_values_with_a_422_naming_the_field(
    orchestrator, recipe, config, field, variable
):
    refused = orchestrator.post("/runs", json={"recipe": recipe, "config": config})
    assert refused.status_code == 422, refused.text
    body = refused.json()
    error = next(e for e in body["errors"] if e["loc"] == ["config", *field.split(".")])
    value = config
    for part in field.split("."):
        value = value[part]
    assert variable in error["msg"] and str(value) in error["msg"], error
    assert f"config.{field}" in body["detail"]
    assert orchestrator.get("/runs").json() == []  # nothing was started
