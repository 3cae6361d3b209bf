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

When a token is configured (setting `token`, LLMRL_TOKEN or its alias LLMRL_ORCHESTRATOR_TOKEN)
every endpoint but /health needs `Authorization: Bearer <token>` (/metrics and the docs too,
unless LLMRL_AUTH_OPEN opens them: common/auth.py). Bad input gets a 4xx
whose `detail` names the problem (unknown recipe, config field and why, unknown run id,
malformed JSON, body over `max_body_bytes`); the service keeps serving. A run past the limits
on active runs (in total, per tenant) or queued episode jobs is a 429 with `Retry-After`, naming
the limit, its use and the setting that raises it (llmrl.orchestrator.limits).

The routes live in one router per resource (routes_runs, routes_artifacts, routes_recipes;
their shared manager and token dependencies in rest_access); `create_app` puts the manager and
the token in the app's state, adds the body limit, health and metrics, and includes them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from llmrl.common import config as cfg
from llmrl.common.auth import add_bearer_auth, configured_token
from llmrl.common.http import ERROR_RESPONSES, configured_max_body_bytes, guard_app
from llmrl.common.logs import configure_logging, log_event
from llmrl.common.metrics import add_health_and_metrics
from llmrl.common.plugins import load_plugins
from llmrl.common.queues import DEFAULT_CLAIM_IDLE_S, make_broker
from llmrl.common.server_paths import redact_server_paths
from llmrl.common.store import RunStore
from llmrl.orchestrator import limits, routes_artifacts, routes_recipes, routes_runs
from llmrl.orchestrator.executors import DEFAULT_RESUBMIT_AFTER_S
from llmrl.orchestrator.manager import RunManager, RunNotActive, RunNotFound
from llmrl.orchestrator.rest_access import GUARDED
from llmrl.orchestrator.routes_experiments import experiments_router
from llmrl.orchestrator.scheduler import ExperimentScheduler
from llmrl.recipes.config import ConfigError

log = logging.getLogger("llmrl.orchestrator")
DEFAULT_MAX_BODY_BYTES = 1 << 20
SETTINGS = {
    "redis_url": "Redis with the episode queues (default LLMRL_REDIS_URL)",
    "home": "artifact directory: run store and run outputs (default LLMRL_HOME)",
    "simulator": "simulator gRPC address for recipes' own worlds, or 'local' (in-process)",
    "llm_gateway": "LLM gateway gRPC address, or 'local' (in-process)",
    "learner": "learner service URL recipes train on, or 'local' (in the orchestrator's "
    "process; default LLMRL_LEARNER_URL's learner, or local with a 'local' simulator)",
    "token": "bearer token required by the API (default LLMRL_TOKEN, LLMRL_ORCHESTRATOR_TOKEN)",
    "max_body_bytes": "largest accepted request body (default LLMRL_MAX_BODY_BYTES, else 1 MiB)",
    "claim_idle_s": "seconds before a silent worker's job is handed to another (default 30)",
    "resubmit_after_s": "seconds without results before a run re-queues lost jobs (default 60)",
    **limits.SETTINGS,
}


async def _config_error(_request: Request, exc: ConfigError) -> JSONResponse:
    # the server's own folders (LLMRL_HOME, data roots) as their variables, never absolute
    errors = [
        {**e, "msg": redact_server_paths(e["msg"])} if isinstance(e.get("msg"), str) else e
        for e in exc.errors
    ]
    return JSONResponse(
        {"detail": redact_server_paths(str(exc)), "errors": errors}, status_code=422
    )


async def _run_not_found(_request: Request, exc: RunNotFound) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=404)


async def _run_not_active(_request: Request, exc: RunNotActive) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=409)


async def _at_capacity(_request: Request, exc: limits.AtCapacity) -> JSONResponse:
    headers = {"Retry-After": str(exc.retry_after_s)}
    return JSONResponse(exc.body(), status_code=429, headers=headers)


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    manager: RunManager = app.state.manager
    scheduler: ExperimentScheduler = app.state.scheduler
    resumed = manager.start()
    scheduler.start()  # after the manager: resumed runs count against max_parallel
    log_event(log, "orchestrator ready", resumed_runs=resumed)
    yield
    scheduler.stop()
    manager.stop()


def create_app(manager: RunManager, token: str | None, max_body_bytes: int) -> FastAPI:
    scheduler = ExperimentScheduler(manager)
    app = FastAPI(
        title="llmrl orchestrator",
        version="1",
        description="Start, watch and cancel runs of llmrl recipes.",
        lifespan=_lifespan,
        responses=ERROR_RESPONSES,
        exception_handlers={
            ConfigError: _config_error,
            RunNotFound: _run_not_found,
            RunNotActive: _run_not_active,
            limits.AtCapacity: _at_capacity,
        },
    )
    app.state.manager = manager
    app.state.scheduler = scheduler  # what the routers' dependencies read
    guard_app(app, max_body_bytes)
    add_bearer_auth(app, token)  # added last: runs first, before the body is read
    add_health_and_metrics(
        app, "orchestrator", check=lambda: {"redis": manager.broker.ping(), "runs": "ok"}
    )
    for routes in (routes_runs, routes_artifacts, routes_recipes):
        app.include_router(routes.router)
    app.include_router(experiments_router(scheduler), dependencies=GUARDED)
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
    simulator = _address(settings.get("simulator"), "simulator")
    return RunManager(
        store,
        broker,
        home,
        simulator=simulator,
        llm_gateway=_address(settings.get("llm_gateway"), "llm_gateway"),
        resubmit_after_s=resubmit_after,
        learner=_learner_url(settings.get("learner"), simulator),
        limits=limits.RunLimits.configured(settings),
    )


def _learner_url(value: Any, simulator: str | None) -> str | None:
    """Where recipes train: 'local' or '' in the orchestrator's process, a URL on that
    learner; by default on the configured learner service, or here with an in-process
    simulator (a learner job steps the simulator service, so it needs one)."""
    if value is None:
        return cfg.http_url("learner") if simulator is not None else None
    return None if str(value) in ("local", "") else str(value)


def serve(host: str, port: int, grpc_port: int | None, settings: dict[str, Any]) -> None:
    """Serve the REST API until SIGTERM/SIGINT (runs in flight resume at the next start)."""
    import uvicorn

    from llmrl.common.tls import uvicorn_options

    configure_logging("orchestrator")
    load_plugins()
    manager = build_manager(settings)
    token = configured_token(settings.get("token"))
    max_body = configured_max_body_bytes(settings.get("max_body_bytes"), DEFAULT_MAX_BODY_BYTES)
    app = create_app(manager, token, max_body)
    log_event(log, "orchestrator listening", host=host, port=port, auth=token is not None)
    uvicorn.run(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5,
        **uvicorn_options(),  # HTTPS when LLMRL_TLS_CERT/KEY are set
    )  # fmt: skip
