"""Fuzzing every HTTP service's OpenAPI schema with schemathesis (issue 14): for each operation,
a bounded number of generated requests (bodies included, since every schema declares them)
must never get a 5xx and must answer with a status and content the schema declares. The
services run in this process over ASGI, against the tiny model and an in-memory broker.

A second pass (issue 52) sends what generated cases rarely reach: bodies nested 10,000 levels
(and 990 around a lone surrogate), and each numeric field of each body and query (for POST
/runs, each number of each recipe's config, from GET /recipes) set to a 400-digit integer,
1e400, the int64 limits or 1e308; no answer may be a 5xx, and the service must still answer
afterwards."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from support.service_apps import SERVICES, service_apps

EXAMPLES_PER_OPERATION = 12
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]  # fmt: skip
# Answers that are no fault of the request: the annotator's learner is not running (503).
TOLERATED = {("annotator", 503)}


@pytest.fixture(scope="module")
def apps(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Every service's app, its lifespan running (the orchestrator's manager) for the module."""
    from starlette.testclient import TestClient

    home = tmp_path_factory.mktemp("fuzz-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LLMRL_HOME", str(home))
        apps = service_apps(tiny_model_dir, home)
        clients = [TestClient(app) for app in apps.values()]
        for client in clients:
            client.__enter__()
        yield apps
        for client in clients:
            client.__exit__(None, None, None)


def fuzz(service: str, app: Any) -> tuple[list[str], list[str]]:
    """Every operation of `app`'s schema, fuzzed: (the operations tried, their failures)."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    tried, failures = [], []
    for result in schema.get_all_operations():
        operation = result.ok()
        tried.append(operation.label)

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        def check(case: Any) -> None:
            response = case.call()
            if (service, response.status_code) in TOLERATED:
                return
            case.validate_response(response, checks=CHECKS)

        try:
            check()
        except Exception as exc:  # every operation is tried; failures are listed together
            failures.append(f"{operation.label}: {exc}")
    return tried, failures


@pytest.mark.parametrize("service", SERVICES)
def test_no_generated_request_gets_a_5xx_or_an_undeclared_answer(apps, service):
    tried, failures = fuzz(service, apps[service])
    assert any(label.startswith("POST") for label in tried)
    assert not failures, "\n\n".join(failures)


# -- the JSON boundary: nesting and extreme numbers on every body and numeric parameter -------
BIG = "9" * 400
NUMBERS = (BIG, "-" + BIG, "1e400", str(2**63 - 1), str(-(2**63 - 1)), "1e308", "-1e308")
DEEP = (
    b"[" * 10_000 + b"]" * 10_000,
    b'{"a":' * 10_000 + b"1" + b"}" * 10_000,
    b"[" * 990 + b'"\\ud800"' + b"]" * 990,  # within the recursion limit; the check recursed
)
HOLE = "\u0000number\u0000"  # where a literal goes in an example body's JSON


def resolve(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """`schema` with a $ref followed and an anyOf/oneOf reduced to its first non-null branch."""
    for _ in range(8):
        if "$ref" in schema:
            schema = components.get(schema["$ref"].rsplit("/", 1)[-1], {})
        elif "anyOf" in schema or "oneOf" in schema:
            branches = schema.get("anyOf") or schema.get("oneOf")
            schema = next((b for b in branches if b.get("type") != "null"), branches[0])
        else:
            break
    return schema


def example(schema: dict[str, Any], components: dict[str, Any], path: tuple = (),
            numbers: list | None = None) -> Any:  # fmt: skip
    """A small value of `schema` (every property filled in); the paths of its numbers are
    appended to `numbers`."""
    schema = resolve(schema, components)
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), None) if isinstance(kind, list) else kind
    if "enum" in schema:
        return schema["enum"][0]
    if kind in ("integer", "number"):
        if numbers is not None:
            numbers.append(path)
        return schema.get("minimum", 1)
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        return {k: example(v, components, (*path, k), numbers) for k, v in properties.items()}
    if kind == "array":
        return [example(schema.get("items", {}), components, (*path, 0), numbers)]
    return {"boolean": False, "string": "x"}.get(kind, "x")


def with_number(body: Any, path: tuple, literal: str) -> bytes:
    """`body` as JSON with the value at `path` replaced by the raw `literal`."""
    if not path:
        return literal.encode()
    copy = json.loads(json.dumps(body))
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = HOLE
    return json.dumps(copy).replace(json.dumps(HOLE), literal).encode()


def boundary_cases(client: Any) -> Iterator[tuple[str, str, dict[str, Any], bytes | None]]:
    """(method, url, query, body) of every case of the second pass for `client`'s app."""
    spec = client.app.openapi()
    components = spec.get("components", {}).get("schemas", {})
    for path, item in spec["paths"].items():
        url = "/".join("x" if part.startswith("{") else part for part in path.split("/"))
        for method, operation in item.items():
            method = method.upper()
            for parameter in operation.get("parameters", []):
                kind = resolve(parameter.get("schema", {}), components).get("type")
                if parameter["in"] == "query" and kind in ("integer", "number"):
                    for literal in NUMBERS:
                        yield method, url, {parameter["name"]: literal}, None
            content = operation.get("requestBody", {}).get("content", {})
            if "application/json" not in content:
                continue
            for deep in DEEP:
                yield method, url, {}, deep
            numbers: list[tuple] = []
            body = example(content["application/json"].get("schema", {}), components, (), numbers)
            for where in numbers:
                for literal in NUMBERS:
                    yield method, url, {}, with_number(body, where, literal)
            if (method, path) == ("POST", "/runs"):
                yield from recipe_config_cases(client, components)


def recipe_config_cases(client: Any, components: dict[str, Any]) -> Iterator[tuple]:
    """POST /runs with each number of each recipe's config (its schema from GET /recipes)
    out of range; only literals the boundary refuses, so no run starts."""
    for recipe in client.get("/recipes").json():
        schema = recipe["config_schema"]
        numbers: list[tuple] = []
        config = example(schema, {**components, **schema.get("$defs", {})}, (), numbers)
        for where in numbers:
            body = {"recipe": recipe["name"], "config": config}
            for literal in NUMBERS[:3]:
                yield "POST", "/runs", {}, with_number(body, ("config", *where), literal)


@pytest.mark.parametrize("service", SERVICES)
def test_deep_bodies_and_extreme_numbers_never_get_a_5xx(apps, service):
    from starlette.testclient import TestClient

    client = TestClient(apps[service], raise_server_exceptions=False)
    headers = {"content-type": "application/json"}
    failures, sent = [], 0
    for method, url, query, body in boundary_cases(client):
        response = client.request(method, url, params=query, content=body, headers=headers)
        sent += 1
        if response.status_code >= 500 and (service, response.status_code) not in TOLERATED:
            shown = (body or b"")[:120]
            failures.append(f"{method} {url} {query} {shown!r}: {response.status_code} "
                            f"{response.text[:200]}")  # fmt: skip
    assert sent > 10
    assert not failures, "\n".join(failures)
    assert client.get("/health").status_code == 200
