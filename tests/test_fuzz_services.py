"""Fuzzing every HTTP service's OpenAPI schema with schemathesis (issue 14): for each operation,
a bounded number of generated requests (bodies included, since every schema declares them)
must never get a 5xx and must answer with a status and content the schema declares. The
services run in this process over ASGI, against the tiny model and an in-memory broker.

A second pass (issue 52) sends what generated cases rarely reach: bodies nested 10,000 levels
(and 990 around a lone surrogate), and each numeric field of each body and query (for POST
/runs, each number of each recipe's config, from GET /recipes) set to a 400-digit integer,
1e400, the int64 limits or 1e308; no answer may be a 5xx, and the service must still answer
afterwards. A third pass sets every free string (recipe configs and every policy kind's spec
included) to a path outside the roots, a planted model, a path climbing out or an id that does
not exist: no 5xx, and no file there is opened (an audit hook watches) or unpickled. A fourth
sends every class of body (an example, a lone surrogate or non-ASCII text in each free string,
the deep bodies, the extreme numbers in each numeric field) in each encoding `json.loads`
reads (UTF-8, UTF-8 with a BOM, UTF-16 and UTF-32, either byte order) to every body route:
no 5xx."""

from __future__ import annotations

import json
import os
import sys
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
            numbers: list | None = None, strings: list | None = None) -> Any:  # fmt: skip
    """A small value of `schema` (every property filled in); the paths of its numbers are
    appended to `numbers`, those of its free strings (no enum) to `strings`."""
    schema = resolve(schema, components)
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), None) if isinstance(kind, list) else kind
    if "enum" in schema or "const" in schema:
        return schema["enum"][0] if "enum" in schema else schema["const"]
    if kind in ("integer", "number"):
        if numbers is not None:
            numbers.append(path)
        return schema.get("minimum", 1)
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        return {k: example(v, components, (*path, k), numbers, strings)
                for k, v in properties.items()}  # fmt: skip
    if kind == "array":
        return [example(schema.get("items", {}), components, (*path, 0), numbers, strings)]
    if kind == "boolean":
        return False
    if strings is not None:
        strings.append(path)
    return "x"


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


# -- every body class in every encoding json.loads reads --------------------------------------
ENCODINGS = ("utf-8", "utf-8-sig", "utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be")
TEXTS = ("\ud800", "\udfff x", "caf\u00e9 \u4e2d \U0001f600")  # lone surrogates, real text


def body_texts(client: Any) -> Iterator[tuple[str, str, str]]:
    """(method, url, JSON text) of each body class for each body route of `client`'s app."""
    spec = client.app.openapi()
    components = spec.get("components", {}).get("schemas", {})
    for path, item in spec["paths"].items():
        url = "/".join("x" if part.startswith("{") else part for part in path.split("/"))
        for method, operation in item.items():
            content = operation.get("requestBody", {}).get("content", {})
            if "application/json" not in content:
                continue
            numbers: list[tuple] = []
            strings: list[tuple] = []
            schema = content["application/json"].get("schema", {})
            body = example(schema, components, (), numbers, strings)
            texts = [json.dumps(body), *(deep.decode() for deep in DEEP)]
            texts += list(string_texts(body, strings))
            texts += [with_number(body, where, literal).decode()
                      for where in numbers for literal in NUMBERS]  # fmt: skip
            for text in texts:
                yield method.upper(), url, text


def string_texts(body: Any, strings: list[tuple]) -> Iterator[str]:
    """`body` with each free string set to each of TEXTS, escaped; real text also unescaped."""
    for where in strings:
        for text in TEXTS:
            yield json.dumps(with_string(body, where, text))  # a surrogate as `\ud800`
            if not any("\ud800" <= char <= "\udfff" for char in text):
                yield json.dumps(with_string(body, where, text), ensure_ascii=False)


@pytest.mark.parametrize("service", SERVICES)
def test_every_body_class_in_every_encoding_never_gets_a_5xx(apps, service):
    from starlette.testclient import TestClient

    client = TestClient(apps[service], raise_server_exceptions=False)
    headers = {"content-type": "application/json"}
    failures, sent = [], 0
    for method, url, text in body_texts(client):
        for encoding in ENCODINGS:
            body = text.encode(encoding)
            response = client.request(method, url, content=body, headers=headers)
            sent += 1
            if response.status_code >= 500 and (service, response.status_code) not in TOLERATED:
                failures.append(f"{method} {url} {encoding} {text[:100]!r}: "
                                f"{response.status_code} {response.text[:200]}")  # fmt: skip
    assert sent > 10 * len(ENCODINGS)
    assert not failures, "\n".join(failures)
    assert client.get("/health").status_code == 200


# -- paths and unknown ids in every string field: nothing outside the roots is opened ---------
class _CreatesFile:
    """Unpickled, it creates `marker`: the payload of a planted model."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.fixture(scope="module")
def canary() -> Iterator[Path]:
    """A folder outside every root (not under LLMRL_HOME nor pytest's temporary folders),
    holding what a request might try to make a service read or load: a data file, an SB3
    zip whose pickle would create `payload-ran`, and a hand-made checkpoint version."""
    import base64
    import pickle
    import shutil
    import tempfile
    import zipfile

    folder = Path(tempfile.mkdtemp(prefix="llmrl-canary-", dir="/var/tmp"))
    payload = base64.b64encode(pickle.dumps(_CreatesFile(folder / "payload-ran"))).decode()
    data = {"policy_class": {":type:": "<class 'type'>", ":serialized:": payload}}
    for zip_path in (folder / "evil.zip", folder / "ckpt" / "1" / "model.zip"):
        zip_path.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(zip_path, "w") as archive:
            archive.writestr("data", json.dumps(data))
    (folder / "ckpt" / "1" / "llmrl_checkpoint.json").write_text('{"algorithm": "ppo"}')
    (folder / "secret.jsonl").write_text('{"messages": []}\n')
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def canary_values(folder: Path) -> tuple[str, ...]:
    climbing = "../" * 24 + str(folder / "secret.jsonl").lstrip("/")
    return (str(folder / "evil.zip"), str(folder / "ckpt" / "1"), str(folder / "ckpt"),
            str(folder / "secret.jsonl"), climbing, "run:no-such-run/models/x.zip",
            "no-such-id")  # fmt: skip


_opened: list[str] = []
_watched: list[str] = []


def _audit(event: str, args: tuple) -> None:
    # an audit hook stays for the process: it only looks while a folder is watched
    if _watched and event == "open" and isinstance(args[0], (str, bytes, Path)):
        name = os.fsdecode(args[0])
        if any(name.startswith(folder) for folder in _watched):
            _opened.append(name)


sys.addaudithook(_audit)


def with_string(body: Any, path: tuple, value: str) -> Any:
    copy = json.loads(json.dumps(body))
    if not path:
        return value
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return copy


def string_cases(client: Any, values: tuple[str, ...]) -> Iterator[tuple[str, str, Any]]:
    """(method, url, body) with each free string of each JSON body set to each of `values`
    (for POST /runs: each string of each recipe's config, and of each policy kind's spec)."""
    spec = client.app.openapi()
    components = spec.get("components", {}).get("schemas", {})
    for path, item in spec["paths"].items():
        url = "/".join(values[-1] if part.startswith("{") else part for part in path.split("/"))
        for method, operation in item.items():
            method = method.upper()
            if method == "GET":
                yield method, url, None  # an id that does not exist, in every path parameter
            content = operation.get("requestBody", {}).get("content", {})
            if "application/json" not in content:
                continue
            strings: list[tuple] = []
            body = example(content["application/json"].get("schema", {}), components, (),
                           [], strings)  # fmt: skip
            for where in strings:
                for value in values:
                    yield method, url, with_string(body, where, value)
            if (method, path) == ("POST", "/runs"):
                yield from run_config_cases(client, values)


def run_config_cases(client: Any, values: tuple[str, ...]) -> Iterator[tuple[str, str, Any]]:
    from llmrl.agents.policy_spec import spec_model
    from llmrl.common.registry import registry

    for recipe in client.get("/recipes").json():
        schema = recipe["config_schema"]
        strings: list[tuple] = []
        config = example(schema, schema.get("$defs", {}), (), [], strings)
        for where in strings:
            for value in values:
                body = {"recipe": recipe["name"], "config": with_string(config, where, value)}
                yield "POST", "/runs", body
    for kind in registry.names("driver"):
        schema = spec_model(kind).model_json_schema()
        strings = []
        policy = {**example(schema, schema.get("$defs", {}), (), [], strings), "kind": kind}
        for where in strings:
            for value in values:
                config = {"env": "SimpleDoorKey", "episodes": 1,
                          "policy": with_string(policy, where, value)}  # fmt: skip
                yield "POST", "/runs", {"recipe": "evaluate", "config": config}


@pytest.fixture(scope="module")
def fresh_apps(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Apps of their own: schemathesis's pass runs the shared apps' lifespans, whose shutdown
    closes the annotator's learner client."""
    home = tmp_path_factory.mktemp("paths-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LLMRL_HOME", str(home))
        yield service_apps(tiny_model_dir, home)


@pytest.mark.parametrize("service", SERVICES)
def test_paths_and_unknown_ids_in_every_string_field_open_nothing_outside_the_roots(
    fresh_apps, service, canary
):
    """Every free string of every body (recipe configs and policy specs included) set to a
    file outside the roots, a planted model or checkpoint, a path climbing out, a run that
    does not exist, and every path parameter an id that does not exist: no 5xx, no file
    under the canary folder opened by this process, no payload run."""
    from starlette.testclient import TestClient

    client = TestClient(fresh_apps[service], raise_server_exceptions=False)
    failures, sent = [], 0
    _watched.append(str(canary))
    try:
        (canary / "secret.jsonl").open().close()
        assert _opened, "the audit hook sees no open()"  # the watch itself works
        _opened.clear()
        for method, url, body in string_cases(client, canary_values(canary)):
            response = client.request(method, url, json=body)
            sent += 1
            if response.status_code >= 500 and (service, response.status_code) not in TOLERATED:
                failures.append(f"{method} {url} {json.dumps(body)[:160]}: "
                                f"{response.status_code} {response.text[:200]}")  # fmt: skip
    finally:
        _watched.remove(str(canary))
    assert sent > 10
    assert not failures, "\n".join(failures)
    assert not _opened, f"opened outside the roots: {sorted(set(_opened))}"
    assert not (canary / "payload-ran").exists()
    assert client.get("/health").status_code == 200
