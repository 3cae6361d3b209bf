"""Every numeric field a client sends is bounded in its model (issue 52, finding 4): numbers
the JSON boundary lets through (int64, finite) but that cannot be used are refused at
submission with a 4xx naming the field, not stored (an infinite budget), accepted and failed
later (a seed numpy refuses), or turned into a 500 (SQLite's "int too large")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from support.service_apps import (
    SERVICES,
    gateway_app,
    learner_app,
    orchestrator_app,
    service_apps,
)

from llmrl.common.bounds import MAX_SEED, MAX_USD
from llmrl.llm_gateway.api_types import GenerateRequest
from llmrl.llm_gateway.errors import InvalidRequestError
from llmrl.recipes.config import ConfigError, validate_config

INT64 = 2**63 - 1


def client_of(app: Any) -> TestClient:
    return TestClient(app, raise_server_exceptions=False)


@pytest.fixture(scope="module")
def gateway(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with client_of(gateway_app(tiny_model_dir, tmp_path_factory.mktemp("gw"))) as client:
        yield client


@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[TestClient]:
    with client_of(orchestrator_app(tmp_path)) as client:
        yield client


def named(response: Any) -> str:
    """The field a refusal names: the guard's / gateway's `field` or `param`, else the loc of
    FastAPI's first error, else the orchestrator's config errors."""
    body = response.json()
    if "error" in body:
        return body["error"]["param"]
    if "field" in body:
        return body["field"]
    errors = body.get("errors") or body["detail"]
    return ".".join(str(part) for part in errors[0]["loc"])


def test_a_budget_is_bounded_and_never_infinite(gateway):
    refused = gateway.put("/v1/budgets/b", json={"usd": MAX_USD * 10})
    assert refused.status_code in (400, 422) and named(refused) == "usd", refused.text
    refused = gateway.put("/v1/budgets/b", json={"calls": INT64 + 1})  # caught at the boundary
    assert refused.status_code == 400 and named(refused) == "body.calls"
    assert gateway.get("/v1/usage/b").json()["budget"]["usd"] is None
    assert gateway.put("/v1/budgets/b", json={"usd": 5, "calls": INT64}).status_code == 200
    assert gateway.get("/v1/usage/b").json()["budget"]["usd"] == 5


def test_a_key_budget_is_bounded(gateway):
    refused = gateway.post("/v1/keys", json={"budget_usd": 1e300})
    assert refused.status_code in (400, 422) and named(refused) == "budget_usd", refused.text
    assert gateway.post("/v1/keys", json={"budget_usd": 1.5}).status_code == 201


def test_sampling_fields_are_bounded(gateway):
    for field, value in (("temperature", 10**18), ("top_p", 2), ("max_tokens", INT64),
                         ("n", 10**9), ("seed", -1)):  # fmt: skip
        refused = gateway.post("/v1/completions", json={"prompt": "hi", field: value})
        assert refused.status_code in (400, 422) and named(refused) == field, refused.text


def test_a_huge_integer_temperature_is_refused_not_an_overflow():
    # the in-process door has no JSON boundary: the model's own check must hold
    with pytest.raises(InvalidRequestError) as refused:
        GenerateRequest(prompt="hi", temperature=10**400).validate()
    assert refused.value.field == "temperature"


def test_an_episode_offset_beyond_int64_is_a_422_not_a_500(orchestrator):
    run_id = orchestrator.app.state.manager.store.create_run("evaluate", {}, "out")
    page = f"/runs/{run_id}/episodes"
    refused = orchestrator.get(page, params={"offset": str(INT64 + 1)})
    assert refused.status_code == 422 and named(refused) == "query.offset", refused.text
    assert orchestrator.get(page, params={"offset": str(INT64)}).json()["episodes"] == []


def test_a_run_seed_beyond_the_bound_is_refused_at_submission(orchestrator):
    for config in ({"seed": MAX_SEED + 1}, {"seed": INT64}, {"episodes": 10**6}):
        refused = orchestrator.post("/runs", json={"recipe": "evaluate", "config": config})
        key = next(iter(config))
        assert refused.status_code == 422 and named(refused) == f"config.{key}", refused.text
    assert orchestrator.get("/runs").json() == []  # nothing was started


def test_every_recipe_config_bounds_its_seed_and_its_numbers():
    from llmrl.common.registry import registry

    for recipe in registry.names("recipe"):
        with pytest.raises(ConfigError) as refused:
            validate_config(recipe, {"seed": MAX_SEED + 1})
        assert refused.value.errors[0]["loc"] == ["config", "seed"], recipe
    # nested numbers too (a config from a file or the command line meets no JSON boundary)
    with pytest.raises(ConfigError) as refused:
        validate_config("evaluate", {"env_kwargs": {"size": float("inf")}})
    assert refused.value.errors[0]["loc"] == ["config", "env_kwargs"]


@pytest.mark.parametrize(
    "seeds", [[0, MAX_SEED + 1], f"0..{MAX_SEED + 1}", "0..99999999999999", [INT64]]
)
def test_experiment_seeds_are_bounded_before_any_list_is_built(orchestrator, seeds):
    refused = orchestrator.post("/experiments", json={"recipe": "evaluate", "seeds": seeds})
    assert refused.status_code == 422 and named(refused).startswith("body.seeds"), refused.text


def test_a_fine_tuning_seed_is_bounded(tmp_path: Path):
    with client_of(learner_app(tmp_path)) as learner:
        refused = learner.post("/jobs", json={"data": ["x.jsonl"], "seed": MAX_SEED + 1})
    assert refused.status_code == 422
    assert any(e["loc"] == ["body", "seed"] for e in refused.json()["detail"])


def test_every_numeric_field_of_every_schema_has_a_maximum(tiny_model_dir, tmp_path):
    """What the schemas declare: every integer and number, body or parameter, is bounded."""
    unbounded = []
    for service, app in service_apps(tiny_model_dir, tmp_path).items():
        schema = app.openapi()
        components = schema.get("components", {}).get("schemas", {})
        for path, item in schema["paths"].items():
            for method, operation in item.items():
                where = f"{service} {method.upper()} {path}"
                unbounded += numbers_without_maximum(operation, where, components)
    assert not unbounded, unbounded
    assert set(SERVICES) == {"llm_gateway", "orchestrator", "learner", "annotator"}


def numbers_without_maximum(node: Any, where: str, components: dict, seen=None) -> list[str]:
    """Paths of `node`'s integer/number schemas that lack a maximum (refs followed once)."""
    seen = set() if seen is None else seen
    found: list[str] = []
    stack = [(node, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, list):
            stack += [(child, f"{path}[{i}]") for i, child in enumerate(item)]
            continue
        if not isinstance(item, dict):
            continue
        ref = item.get("$ref")
        if isinstance(ref, str) and ref not in seen:
            seen.add(ref)
            stack.append((components.get(ref.rsplit("/", 1)[-1], {}), f"{path}->{ref}"))
        kinds = item.get("type") if isinstance(item.get("type"), list) else [item.get("type")]
        numeric = {"integer", "number"} & set(kinds)
        if numeric and "maximum" not in item and "exclusiveMaximum" not in item:
            found.append(path)
        stack += [(child, f"{path}.{key}") for key, child in item.items() if key != "$ref"]
    return found
