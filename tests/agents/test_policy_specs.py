"""Typed policy specs (issue 52 finding 9, issue 54): a spec is checked against its kind's model
when a run is submitted, so one that would fail at run time is a 422 naming its full key; the
driver reads the typed spec, its defaults written once in the model."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from llmrl.agents.policy_spec import parse_policy_spec, spec_model


@pytest.fixture(scope="module")
def orchestrator(tmp_path_factory: pytest.TempPathFactory):
    from llmrl.common.queues import make_broker
    from llmrl.common.store import RunStore
    from llmrl.orchestrator.manager import RunManager
    from llmrl.orchestrator.service import create_app

    home = tmp_path_factory.mktemp("orchestrator")
    store = RunStore(home / "orchestrator.sqlite")
    manager = RunManager(store, make_broker(None), home, simulator=None, llm_gateway=None)
    with TestClient(create_app(manager, token=None, max_body_bytes=1 << 20)) as client:
        yield client


ORACLE = {"name": "oracle"}


@pytest.mark.parametrize(
    ("policy", "named"),
    [
        ({"kind": "planner", "name": "nope"}, "policy.name: unknown planner 'nope'"),
        ({"kind": "planner", "name": "oracle", "colour": 1}, "policy.colour: Extra inputs"),
        ({"kind": "planner"}, "policy.name: Field required"),
        ({"kind": "when2ask", "planner": ORACLE}, "policy.ask: Field required"),
        ({"kind": "when2ask", "planner": ORACLE, "ask": {"method": "sometimes"}},
         "policy.ask.method: expected one of"),
        ({"kind": "when2ask", "planner": ORACLE, "ask": {"method": "random", "p": 2}},
         "policy.ask.p: Input should be less than or equal to 1"),
        ({"kind": "when2ask", "planner": ORACLE, "ask": {"method": "learned"}},
         "policy.ask.model: the learned method needs"),
        ({"kind": "when2ask", "planner": ORACLE, "ask": {"method": "until-confident"}},
         "policy.sees_confidence: until-confident needs"),
        ({"kind": "when2ask", "planner": {"name": "nope"}, "ask": {"method": "always"}},
         "policy.planner.name: unknown planner"),
        ({"kind": "when2ask", "planner": ORACLE, "ask": {"method": "always"}, "lam": -1},
         "policy.lam: Input should be greater than or equal to 0"),
        ({"kind": "glam", "model": "smollm2", "reduction": "max"}, "policy.reduction"),
        ({"kind": "glam"}, "policy.model: Field required"),
        ({"kind": "glam-random", "greedy": True}, "policy.greedy: Extra inputs"),
        ({"kind": "ellm-dqn"}, "policy.checkpoint: Field required"),
        ({"kind": "kalm-offline", "algorithm": "magic", "checkpoint": "x"},
         "policy.algorithm: unknown algorithm 'magic'"),
        ({"kind": "housekeep-planner"}, "policy.name: Field required"),
        ({"kind": "housekeep-demonstration", "name": "oracle", "few_shot": "often"},
         "policy.few_shot: Input should be a valid boolean"),
    ],
)  # fmt: skip
def test_a_spec_that_would_fail_at_run_time_is_refused_at_submission(orchestrator, policy, named):
    config = {"env": "SimpleDoorKey", "episodes": 1, "policy": policy}
    response = orchestrator.post("/runs", json={"recipe": "evaluate", "config": config})
    assert response.status_code == 422, response.text
    assert named in response.text
    assert orchestrator.get("/health").status_code == 200  # and the service keeps serving


def test_every_registered_kind_declares_its_spec():
    from llmrl.common.registry import registry

    for kind, entry in registry.entries("driver").items():
        if not entry.obj.__module__.startswith("llmrl."):
            continue  # a test's or plugin's kind may go without a model
        assert spec_model(kind).model_fields["kind"].default == kind, kind


def test_a_valid_spec_keeps_its_given_fields_and_the_driver_reads_defaults_from_the_model():
    spec = parse_policy_spec({"kind": "when2ask", "planner": "oracle", "ask": {"method": "always"}})
    assert spec.planner.name == "oracle" and spec.planner.kwargs == {}
    assert (spec.lam, spec.sees_time, spec.planner_entries) == (0.01, False, "at_queries")
    assert parse_policy_spec({"name": "oracle"}).kind == "planner"  # the default kind
