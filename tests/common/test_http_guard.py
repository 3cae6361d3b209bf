"""The shared request guard and error handlers (`llmrl.common.http`) on the learner, the
annotator and the orchestrator (issue 14): a body over the limit is a 413 naming it, a lone
surrogate in any JSON string a 400 naming the field, a wrong type a 422 naming the field whose
answer echoes nothing unencodable, and the service keeps serving."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from llmrl.common.http import configured_max_body_bytes, lone_surrogate_field

LIMIT = 2048


def learner(tmp_path: Path) -> Any:
    from llmrl.learner.service import create_app

    return create_app(tmp_path / "jobs", max_body_bytes=LIMIT)


def annotator(tmp_path: Path) -> Any:
    from llmrl.annotator.service import create_app

    return create_app(tmp_path / "jobs", "http://127.0.0.1:9", max_body_bytes=LIMIT)


def orchestrator(tmp_path: Path) -> Any:
    from llmrl.common.queues import make_broker
    from llmrl.common.store import RunStore
    from llmrl.orchestrator.manager import RunManager
    from llmrl.orchestrator.service import create_app

    manager = RunManager(
        RunStore(tmp_path / "runs.sqlite"), make_broker(None), tmp_path, None, None
    )
    return create_app(manager, token=None, max_body_bytes=LIMIT)


# (service factory, a POST path, a body whose one string field is where the surrogate goes)
SERVICES = {
    "learner": (learner, "/jobs", "data"),
    "annotator": (annotator, "/datasets/bootstrap", "out_dir"),
    "orchestrator": (orchestrator, "/runs", "recipe"),
}


@pytest.fixture(params=sorted(SERVICES))
def service(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[TestClient, str, str]]:
    make, path, field = SERVICES[request.param]
    with TestClient(make(tmp_path), raise_server_exceptions=False) as client:
        yield client, path, field


def test_a_body_over_the_limit_is_413_naming_it(service):
    client, path, _ = service
    refused = client.post(path, content=b'{"x": "' + b"y" * LIMIT + b'"}')
    assert refused.status_code == 413
    assert f"{LIMIT} bytes" in refused.json()["detail"]
    assert client.get("/health").status_code == 200


def test_a_lone_surrogate_is_a_400_naming_the_field(service):
    client, path, field = service
    body = f'{{"{field}": "bad \\ud800 text", "config": {{}}}}'.encode()
    refused = client.post(path, content=body, headers={"content-type": "application/json"})
    assert refused.status_code == 400, refused.text
    assert refused.json()["field"] == f"body.{field}"
    assert "surrogate" in refused.json()["detail"]
    assert client.get("/health").status_code == 200


def test_a_wrong_type_is_a_422_naming_the_field_without_echoing_it(service):
    client, path, field = service
    refused = client.post(path, json={field: {"nested": ["\u00e9"]}, "epochs": "many"})
    assert refused.status_code == 422, refused.text
    errors = refused.json()["detail"]
    assert errors and all("loc" in e and "msg" in e and "input" not in e for e in errors)


def test_a_surrogate_pair_is_a_character_not_an_error():
    assert lone_surrogate_field({"a": ["ok", "\U0001f600"]}) is None
    assert lone_surrogate_field({"a": ["ok", {"b": "\ud800"}]}) == "body.a[1].b"


def test_the_limit_is_configurable_and_checked(monkeypatch):
    monkeypatch.setenv("LLMRL_MAX_BODY_BYTES", "1000")
    assert configured_max_body_bytes() == 1000
    assert configured_max_body_bytes(5000) == 5000
    with pytest.raises(ValueError, match="max_body_bytes"):
        configured_max_body_bytes("lots")
