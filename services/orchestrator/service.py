"""The orchestrator's REST API (FastAPI): start, watch and cancel runs; list recipes.

    POST /runs {recipe, config}     201 {run_id, ...}      start a run
    GET  /runs                       every run (?status=)
    GET  /runs/{id}                  status, current phase, progress, summary, LLM spend
    POST /runs/{id}/cancel           202
    GET  /runs/{id}/episodes         episode records, paged (?offset=&limit=&phase=)
    GET  /runs/{id}/artifacts        the run's files; GET /runs/{id}/artifacts/{name} downloads
    GET  /recipes                    every recipe with its config's JSON schema
    /experiments                     named sets of runs (grid × seeds): routes_experiments.py
    GET  /health, GET /metrics, GET /docs (OpenAPI)

When a token is configured (LLMRL_ORCHESTRATOR_TOKEN or setting `token`) every endpoint but
/health, /metrics and the docs needs `Authorization: Bearer <token>`. Bad input gets a 4xx
whose `detail` names the problem (unknown recipe, config field and why, unknown run id,
malformed JSON, body over `max_body_bytes`); the service keeps serving.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from llmrl.common import config as cfg
from llmrl.common import store as states
from llmrl.common.logs import configure_logging, log_event
from llmrl.common.metrics import add_health_and_metrics
from llmrl.common.plugins import load_plugins
from llmrl.common.queues import DEFAULT_CLAIM_IDLE_S, make_broker
from llmrl.common.store import RunRow, RunStore
from llmrl.orchestrator.executors import DEFAULT_RESUBMIT_AFTER_S
from llmrl.orchestrator.manager import RunManager, RunNotActive, RunNotFound
from llmrl.orchestrator.routes_experiments import experiments_router
from llmrl.orchestrator.scheduler import ExperimentScheduler
from llmrl.recipes.base import ConfigError, recipe_schemas

log = logging.getLogger("llmrl.orchestrator")
TOKEN_VAR = "LLMRL_ORCHESTRATOR_TOKEN"
DEFAULT_MAX_BODY_BYTES = 1 << 20
SETTINGS = {
    "redis_url": "Redis with the episode queues (default LLMRL_REDIS_URL)",
    "home": "artifact directory: run store and run outputs (default LLMRL_HOME)",
    "simulator": "simulator gRPC address for recipes' own worlds, or 'local' (in-process)",
    "llm_gateway": "LLM gateway gRPC address, or 'local' (in-process)",
    "token": "bearer token required by the API (default LLMRL_ORCHESTRATOR_TOKEN)",
    "max_body_bytes": "largest accepted request body (default 1 MiB)",
    "claim_idle_s": "seconds before a silent worker's job is handed to another (default 30)",
    "resubmit_after_s": "seconds without results before a run re-queues lost jobs (default 60)",
}


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    recipe: str = Field(description="A registered recipe (GET /recipes).")
    config: dict[str, Any] = Field(
        default_factory=dict, description="The recipe's config (its schema: GET /recipes)."
    )


class BodyLimit:
    """ASGI middleware: a request body over `max_bytes` gets 413 before the app sees it."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._reject(send)
            return
        chunks, size, more = [], 0, True
        while more:  # read (at most max_bytes of) the body here, then replay it to the app
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, receive, send)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_bytes:
                await self._reject(send)
                return
        body, replayed = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _reject(self, send: Callable) -> None:
        detail = f"request body too large: the limit is {self.max_bytes} bytes"
        body = json.dumps({"detail": detail}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})


def run_view(run: RunRow, manager: RunManager, full: bool = True) -> dict[str, Any]:
    view = {
        "run_id": run.run_id,
        "recipe": run.recipe,
        "status": run.status,
        "current_phase": run.current_phase,
        "created": run.created,
        "updated": run.updated,
        "error": run.error,
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


def create_app(manager: RunManager, token: str | None, max_body_bytes: int) -> FastAPI:
    scheduler = ExperimentScheduler(manager)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):  # type: ignore[no-untyped-def]
        resumed = manager.start()
        scheduler.start()  # after the manager: resumed runs count against max_parallel
        log_event(log, "orchestrator ready", resumed_runs=resumed)
        yield
        scheduler.stop()
        manager.stop()

    app = FastAPI(
        title="llmrl orchestrator",
        version="1",
        description="Start, watch and cancel runs of llmrl recipes.",
        lifespan=lifespan,
    )
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    bearer = HTTPBearer(auto_error=False)

    def authorize(
        credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
    ) -> None:
        if token is None:
            return
        if credentials is None or not hmac.compare_digest(
            credentials.credentials.encode(), token.encode()
        ):
            raise HTTPException(
                401,
                "missing or wrong bearer token (send 'Authorization: Bearer <token>')",
                headers={"WWW-Authenticate": "Bearer"},
            )

    add_health_and_metrics(
        app, "orchestrator", check=lambda: {"redis": manager.broker.ping(), "runs": "ok"}
    )
    guarded = [Depends(authorize)]

    @app.exception_handler(ConfigError)
    async def config_error(_request: Request, exc: ConfigError) -> JSONResponse:
        return JSONResponse({"detail": str(exc), "errors": exc.errors}, status_code=422)

    @app.exception_handler(RunNotFound)
    async def run_not_found(_request: Request, exc: RunNotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(RunNotActive)
    async def run_not_active(_request: Request, exc: RunNotActive) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=409)

    @app.post("/runs", status_code=201, dependencies=guarded, tags=["runs"])
    def start_run(request: RunRequest) -> dict[str, Any]:
        """Start a run of `recipe` with `config`; returns its id (201)."""
        run = manager.submit(request.recipe, request.config)
        return run_view(run, manager, full=False)

    @app.get("/runs", dependencies=guarded, tags=["runs"])
    def list_runs(
        status: str | None = Query(None, description=f"one of {', '.join(states.RUN_STATES)}"),
    ) -> list[dict[str, Any]]:
        if status is not None and status not in states.RUN_STATES:
            allowed = ", ".join(states.RUN_STATES)
            raise HTTPException(422, f"unknown status {status!r}; statuses: {allowed}")
        return [run_view(run, manager, full=False) for run in manager.store.list_runs(status)]

    @app.get("/runs/{run_id}", dependencies=guarded, tags=["runs"])
    def get_run(run_id: str) -> dict[str, Any]:
        return run_view(manager.get(run_id), manager)

    @app.post("/runs/{run_id}/cancel", status_code=202, dependencies=guarded, tags=["runs"])
    def cancel_run(run_id: str) -> dict[str, Any]:
        return run_view(manager.cancel(run_id), manager, full=False)

    @app.get("/runs/{run_id}/episodes", dependencies=guarded, tags=["runs"])
    def list_episodes(
        run_id: str,
        offset: int = Query(0, ge=0),
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

    @app.get("/runs/{run_id}/artifacts", dependencies=guarded, tags=["artifacts"])
    def list_artifacts(run_id: str) -> list[dict[str, Any]]:
        manager.get(run_id)
        return [
            {
                "name": a["name"],
                "kind": a["kind"],
                "size": a["size"],
                "url": f"/runs/{run_id}/artifacts/{a['name']}",
            }
            for a in manager.store.artifacts(run_id)
        ]

    @app.get("/runs/{run_id}/artifacts/{name:path}", dependencies=guarded, tags=["artifacts"])
    def download_artifact(run_id: str, name: str) -> FileResponse:
        manager.get(run_id)
        # Only registered artifacts are served: a name is looked up, never joined to a path.
        found = {a["name"]: a for a in manager.store.artifacts(run_id)}
        if name not in found:
            known = ", ".join(found) or "(none yet)"
            raise HTTPException(404, f"run {run_id} has no artifact {name!r}; artifacts: {known}")
        path = Path(found[name]["path"])
        if not path.is_file():
            raise HTTPException(404, f"artifact {name!r} of run {run_id} is no longer on disk")
        return FileResponse(path, filename=path.name)

    app.include_router(experiments_router(scheduler), dependencies=guarded)

    @app.get("/recipes", dependencies=guarded, tags=["recipes"])
    def list_recipes() -> list[dict[str, Any]]:
        return list(recipe_schemas().values())

    return app


def _settings(settings: dict[str, Any]) -> dict[str, Any]:
    cfg.check_settings("orchestrator", settings, SETTINGS)
    return settings


def _address(value: Any, service: str) -> str | None:
    """'local' or '' means in-process; None means the configured default address."""
    address = cfg.grpc_address(service) if value is None else str(value)
    return None if address in ("local", "") else address


def build_manager(settings: dict[str, Any]) -> RunManager:
    settings = _settings(settings)
    home = Path(settings.get("home") or cfg.home_dir())
    home.mkdir(parents=True, exist_ok=True)
    claim_idle = float(
        settings.get("claim_idle_s") or os.environ.get("LLMRL_CLAIM_IDLE_S") or DEFAULT_CLAIM_IDLE_S
    )
    broker = make_broker(settings.get("redis_url") or cfg.redis_url(), claim_idle)
    store = RunStore(home / "orchestrator.sqlite")
    resubmit_after = float(
        settings.get("resubmit_after_s")
        or os.environ.get("LLMRL_RESUBMIT_AFTER_S")
        or DEFAULT_RESUBMIT_AFTER_S
    )
    return RunManager(
        store,
        broker,
        home,
        simulator=_address(settings.get("simulator"), "simulator"),
        llm_gateway=_address(settings.get("llm_gateway"), "llm_gateway"),
        resubmit_after_s=resubmit_after,
    )


def serve(host: str, port: int, grpc_port: int | None, settings: dict[str, Any]) -> None:
    """Serve the REST API until SIGTERM/SIGINT (runs in flight resume at the next start)."""
    import uvicorn

    configure_logging("orchestrator")
    load_plugins()
    manager = build_manager(settings)
    token = settings.get("token") or os.environ.get(TOKEN_VAR) or None
    max_body = int(settings.get("max_body_bytes") or DEFAULT_MAX_BODY_BYTES)
    app = create_app(manager, token, max_body)
    log_event(log, "orchestrator listening", host=host, port=port, auth=token is not None)
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5)
