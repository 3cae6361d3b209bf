"""What every router of the orchestrator's REST API shares: the run manager of the app serving
the request, and the bearer-token check (a no-op when the app has no token)."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from llmrl.orchestrator.manager import RunManager

_bearer = HTTPBearer(auto_error=False)


def manager_of(request: Request) -> RunManager:
    """The run manager `create_app` put in the app's state."""
    return request.app.state.manager


# A route parameter annotated with this receives the app's run manager (not a request field).
ManagerDep = Annotated[RunManager, Depends(manager_of)]


def authorize(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),
) -> None:
    """401 unless the request carries the app's token (`app.state.token`; None: no auth)."""
    token: str | None = request.app.state.token
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


# Every router but /health, /metrics and the docs is guarded by this.
GUARDED = [Depends(authorize)]
