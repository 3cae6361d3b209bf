"""A run whose estimated memory exceeds the machine's is refused when it is submitted, naming the
settings to lower, instead of being killed by the kernel an hour in: GLAM's full fine-tuning with
a whole 64-sample minibatch per backward (~34 GiB) each of whose settings is ordinary."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from llmrl.common.memory_fit import GIB, MEMORY_VARIABLE, memory_limit
from llmrl.recipes.config import ConfigError, validate_config

# every weight trained, the whole minibatch in one backward (full fine-tuning's default is
# microbatches of 8)
WHOLE = {"minibatch_size": 64, "microbatch_size": 64}
FULL_WHOLE_MINIBATCH = {"methods": ["glam"], "finetune": "full", "ppo": WHOLE}


@pytest.fixture
def small_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MEMORY_VARIABLE, "16")


def test_a_run_over_the_memory_is_refused_naming_the_setting_and_the_figures(small_machine):
    with pytest.raises(ConfigError) as refused:
        validate_config("glam", FULL_WHOLE_MINIBATCH)
    (error,) = refused.value.errors
    assert error["loc"] == ["config", "ppo", "microbatch_size"] and error["type"] == "over_memory"
    message = str(refused.value)
    assert "would need about 34.0 GiB" in message and "16.0 GiB" in message
    assert MEMORY_VARIABLE in message and "lower ppo.microbatch_size" in message


def test_the_same_run_in_microbatches_fits(small_machine):
    config = validate_config(
        "glam", {**FULL_WHOLE_MINIBATCH, "ppo": {**WHOLE, "microbatch_size": 4}}
    )
    estimate = config.memory_estimate()
    assert estimate is not None and estimate.total < 16 * GIB
    assert validate_config("glam", {}).memory_estimate().total < 16 * GIB  # the defaults
    full = validate_config("glam", {"finetune": "full"})  # microbatches of 8 unless set
    assert full.memory_estimate().total < 16 * GIB


def test_an_operator_with_a_bigger_machine_raises_the_memory(monkeypatch):
    monkeypatch.setenv(MEMORY_VARIABLE, "64")
    assert validate_config("glam", FULL_WHOLE_MINIBATCH).finetune == "full"


@pytest.mark.parametrize("value", ["0", "-2", "nan", "inf", "lots"])
def test_a_memory_variable_that_is_no_positive_number_is_refused(monkeypatch, value):
    monkeypatch.setenv(MEMORY_VARIABLE, value)
    with pytest.raises(ValueError, match=MEMORY_VARIABLE):
        memory_limit()


def test_a_run_submitted_under_a_broken_memory_variable_gets_a_config_error(monkeypatch):
    monkeypatch.setenv(MEMORY_VARIABLE, "lots")
    with pytest.raises(ConfigError, match=f"{MEMORY_VARIABLE}: expected a positive number"):
        validate_config("glam", {})


def test_without_the_variable_the_limit_is_the_machines(monkeypatch):
    monkeypatch.delenv(MEMORY_VARIABLE, raising=False)
    limit, source = memory_limit()
    assert limit > 0 and source in ("this machine's memory", "this container's memory limit")


@pytest.fixture
def orchestrator(tmp_path: Path, small_machine) -> Iterator[TestClient]:
    from support.service_apps import orchestrator_app

    with TestClient(orchestrator_app(tmp_path), raise_server_exceptions=False) as client:
        yield client


def test_post_runs_refuses_it_with_a_422_and_starts_nothing(orchestrator):
    refused = orchestrator.post("/runs", json={"recipe": "glam", "config": FULL_WHOLE_MINIBATCH})
    assert refused.status_code == 422, refused.text
    (error,) = refused.json()["errors"]
    assert error["loc"] == ["config", "ppo", "microbatch_size"] and "34.0 GiB" in error["msg"]
    assert orchestrator.get("/runs").json() == []
    assert orchestrator.get("/health").status_code == 200  # still serving
