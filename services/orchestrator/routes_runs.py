"""Runs: POST /runs (start), GET /runs (list), GET /runs/{id} (status, phases, progress,
summary, LLM spend), POST /runs/{id}/cancel, GET /runs/{id}/episodes (paged records)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, ConfigDict, Field

from llmrl.common import store as states
from llmrl.common.bounds import MAX_INT64
from llmrl.common.server_paths import redact_server_paths
from llmrl.common.store import RunRow
from llmrl.orchestrator.manager import RunManager
from llmrl.orchestrator.rest_access import GUARDED, ManagerDep, TenantDep

router = APIRouter(tags=["runs"], dependencies=GUARDED)


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    recipe: str = Field(description="A registered recipe (GET /recipes).")
    config: dict[str, Any] = Field(
        default_factory=dict, description="The recipe's config (its schema: GET /recipes)."
    )


def run_view(run: RunRow, manager: RunManager, full: bool = True) -> dict[str, Any]:
    view = {
        "run_id": run.run_id,
        "recipe": run.recipe,
        "status": run.status,
        "current_phase": run.current_phase,
        "created": run.created,
        "updated": run.updated,
        # a failed run's error names the server's folders by their variables
        "error": redact_server_paths(run.error) if run.error else run.error,
    }
    if not full:
        return view
    view.update(
        config=run.config,
        cancel_requested=run.cancel_requested,
        phases=[{k: v for k, v in p.items() if k != "outputs"} for p in run.phases],
        progress=manager.progress(run.run_id),
        episodes_stored=manager.store.count_episodes(run.run_id),
        summary=run.summary,
        llm=manager.store.llm_totals(run.run_id),
        llm_ledger=_ledger(manager, run.run_id),
    )
    return view


def _ledger(manager: RunManager, run_id: str) -> dict[str, Any] | None:
    """The gateway ledger's totals for the run, when a gateway is configured and reachable."""
    if manager.llm_gateway is None:
        return None
    try:
        return manager.ledger_client().usage(run_id)
    except Exception as exc:  # no gateway yet, or unreachable: say so, do not fail the call
        return {"error": f"gateway ledger unavailable: {type(exc).__name__}"}


@router.post(
    "/runs",
    status_code=201,
    responses={429: {"description": "a limit on active runs or queued episodes is reached"}},
)
def start_run(request: RunRequest, manager: ManagerDep, tenant: TenantDep) -> dict[str, Any]:
    """Start a run of `recipe` with `config`; returns its id (201). A 429 (with `Retry-After`)
    when the orchestrator runs as many runs, or holds as many queued episodes, as it may."""
    run = manager.submit(request.recipe, request.config, tenant=tenant)
    return run_view(run, manager, full=False)


@router.get("/runs")
def list_runs(
    manager: ManagerDep,
    status: str | None = Query(None, description=f"one of {', '.join(states.RUN_STATES)}"),
) -> list[dict[str, Any]]:
    if status is not None and status not in states.RUN_STATES:
        allowed = ", ".join(states.RUN_STATES)
        raise HTTPException(422, f"unknown status {status!r}; statuses: {allowed}")
    return [run_view(run, manager, full=False) for run in manager.store.list_runs(status)]


@router.get("/runs/{run_id}")
def get_run(run_id: str, manager: ManagerDep) -> dict[str, Any]:
    return run_view(manager.get(run_id), manager)


@router.post("/runs/{run_id}/cancel", status_code=202)
def cancel_run(run_id: str, manager: ManagerDep) -> dict[str, Any]:
    return run_view(manager.cancel(run_id), manager, full=False)


@router.get("/runs/{run_id}/episodes")
def list_episodes(
    run_id: str,
    manager: ManagerDep,
    offset: int = Query(0, ge=0, le=MAX_INT64, description="episodes to skip"),
    limit: int = Query(100, ge=1, le=1000),
    phase: str | None = Query(None, description="only this phase's episodes"),
) -> dict[str, Any]:
    manager.get(run_id)
    records = manager.store.episodes(run_id, phase=phase, offset=offset, limit=limit)
    return {
        "run_id": run_id,
        "total": manager.store.count_episodes(run_id, phase),
        "offset": offset,
        "limit": limit,
        "episodes": [record.to_dict() for record in records],
    }
