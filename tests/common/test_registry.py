"""The registry: duplicate names refused, unknown names listed with the known ones, policy
jobs registered with their request model."""

from __future__ import annotations

import pytest

from llmrl.common.registry import Registry, UnknownNameError


def test_registry_rejects_duplicates_and_lists_known_names():
    reg = Registry()
    reg._loaded.add("planner")  # no built-ins for this private registry

    @reg.register_planner("first")
    class First:
        """The first planner."""

    assert reg.get_planner("first") is First
    assert reg.entry("planner", "first").description == "The first planner."
    with pytest.raises(ValueError, match="already registered"):
        reg.register_planner("first")(object)
    with pytest.raises(UnknownNameError, match="registered planners: first"):
        reg.get_planner("second")


def test_policy_jobs_register_a_request_model_with_their_run_function():
    from pydantic import BaseModel

    reg = Registry()
    reg._loaded.add("policy_job")  # no built-ins for this private registry

    class CountJob(BaseModel):
        kind: str = "count"
        steps: int

    @reg.register_policy_job("count", request=CountJob)
    def count(job: CountJob, report) -> dict:
        report(job.steps)
        return {"steps": job.steps}

    request_model, run = reg.get_policy_job("count")
    reported: list[int] = []
    assert request_model is CountJob
    assert run(request_model(steps=3), reported.append) == {"steps": 3} and reported == [3]
    with pytest.raises(UnknownNameError, match="registered policy_jobs: count"):
        reg.get_policy_job("other")

    class NoKind(BaseModel):  # requests are routed by `kind`: a model without it is refused
        steps: int

    with pytest.raises(TypeError, match="kind"):
        reg.register_policy_job("no-kind", request=NoKind)
