"""The orchestrator's experiment routes (included by the REST app, behind its bearer token).

    POST /experiments {name?, recipe, config?, grid?, seeds?, max_parallel?}   201 {experiment_id}
    GET  /experiments                     every experiment (?status=)
    GET  /experiments/{id}                each run's id, grid point, seed, state, phase and
                                          (failed) error; the aggregate (the report as data)
                                          once it has ended
    POST /experiments/{id}/cancel         202: queued runs never start, running ones cancelled
    GET  /experiments/{id}/report/{name}  results.md, results.json or a plot of the report

A bad spec (unknown recipe or config key, an empty grid axis, a malformed seed range, more
runs than LLMRL_MAX_EXPERIMENT_RUNS) gets a 422 naming the field, and nothing is started.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import FileResponse

from llmrl.common import store as states
from llmrl.orchestrator.experiments import ExperimentSpec
from llmrl.orchestrator.manager import RunNotActive
from llmrl.orchestrator.scheduler import ExperimentNotFound, ExperimentScheduler


def experiments_router(scheduler: ExperimentScheduler) -> APIRouter:
    router = APIRouter(prefix="/experiments", tags=["experiments"])

    def found(experiment_id: str):  # type: ignore[no-untyped-def]
        try:
            return scheduler.get(experiment_id)
        except ExperimentNotFound as exc:
            raise HTTPException(404, str(exc)) from None

    @router.post("", status_code=201)
    def submit_experiment(spec: ExperimentSpec) -> dict[str, Any]:
        """Plan the experiment's runs and queue them; returns its id (201)."""
        experiment = scheduler.submit(spec)
        return scheduler.view(experiment, full=False)

    @router.get("")
    def list_experiments(
        status: str | None = Query(None, description=f"one of {', '.join(states.RUN_STATES)}"),
    ) -> list[dict[str, Any]]:
        if status is not None and status not in states.RUN_STATES:
            allowed = ", ".join(states.RUN_STATES)
            raise HTTPException(422, f"unknown status {status!r}; statuses: {allowed}")
        experiments = scheduler.store.list_experiments(status)
        return [scheduler.view(scheduler.get(e.experiment_id), full=False) for e in experiments]

    @router.get("/{experiment_id}")
    def get_experiment(experiment_id: str) -> dict[str, Any]:
        return scheduler.view(found(experiment_id))

    @router.post("/{experiment_id}/cancel", status_code=202)
    def cancel_experiment(experiment_id: str) -> dict[str, Any]:
        found(experiment_id)
        try:
            return scheduler.view(scheduler.cancel(experiment_id), full=False)
        except RunNotActive as exc:
            raise HTTPException(409, str(exc)) from None

    @router.get("/{experiment_id}/report/{name}")
    def download_report_file(experiment_id: str, name: str) -> FileResponse:
        experiment = found(experiment_id)
        path = scheduler.report_file(experiment, name)
        if path is None:
            raise HTTPException(
                404, f"experiment {experiment_id} has no report file {name!r} (yet)"
            )
        return FileResponse(path, filename=path.name)

    return router
