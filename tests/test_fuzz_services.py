"""Fuzzing every HTTP service's OpenAPI schema with schemathesis (issue 14): for each operation,
a bounded number of generated requests (bodies included, since every schema declares them)
must never get a 5xx and must answer with a status and content the schema declares. The
services run in this process over ASGI, against the tiny model and an in-memory broker."""

from __future__ import annotations

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
    home = tmp_path_factory.mktemp("fuzz-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LLMRL_HOME", str(home))
        yield service_apps(tiny_model_dir, home)


def fuzz(service: str, app: Any) -> tuple[list[str], list[str]]:
    """Every operation of `app`'s schema, fuzzed: (the operations tried, their failures)."""
    from starlette.testclient import TestClient

    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    tried, failures = [], []
    with TestClient(app):  # runs the app's lifespan (the orchestrator's manager)
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
