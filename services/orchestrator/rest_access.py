"""What every router of the orchestrator's REST API shares: the run manager of the app serving
the request, and the bearer scheme its OpenAPI schema declares."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPBearer

from llmrl.orchestrator.manager import RunManager


def manager_of(request: Request) -> RunManager:
    """The run manager `create_app` put in the app's state."""
    return request.app.state.manager


# A route parameter annotated with this receives the app's run manager (not a request field).
ManagerDep = Annotated[RunManager, Depends(manager_of)]


# The token itself is checked by common.auth's middleware on every path but /health; this
# dependency only declares the bearer scheme in the OpenAPI schema (docs and fuzzers send it).
GUARDED = [Depends(HTTPBearer(auto_error=False))]
