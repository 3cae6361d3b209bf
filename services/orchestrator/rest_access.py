"""What every router of the orchestrator's REST API shares: the run manager of the app serving
the request, the tenant a request acts for, and the bearer scheme its OpenAPI schema declares."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPBearer

from llmrl.orchestrator.limits import DEFAULT_TENANT
from llmrl.orchestrator.manager import RunManager


def manager_of(request: Request) -> RunManager:
    """The run manager `create_app` put in the app's state."""
    return request.app.state.manager


# A route parameter annotated with this receives the app's run manager (not a request field).
ManagerDep = Annotated[RunManager, Depends(manager_of)]


def tenant_of(request: Request) -> str:
    """Whom a request acts for, as far as the orchestrator's auth tells callers apart (what the
    per-tenant limits count). It knows one credential, the shared token (or none), so every
    caller is the one tenant DEFAULT_TENANT; an auth that tells callers apart would name them
    in `request.state.tenant`."""
    return getattr(request.state, "tenant", None) or DEFAULT_TENANT


TenantDep = Annotated[str, Depends(tenant_of)]


# The token itself is checked by common.auth's middleware on every path but /health; this
# dependency only declares the bearer scheme in the OpenAPI schema (docs and fuzzers send it).
GUARDED = [Depends(HTTPBearer(auto_error=False))]
