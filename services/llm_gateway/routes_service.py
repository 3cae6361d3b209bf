"""GET /health (the models served and the mode) and GET /metrics (the gateway's Prometheus
registry)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from llmrl.llm_gateway.rest_requests import GatewayDep

router = APIRouter()


@router.get("/health")
def health(gateway: GatewayDep) -> dict[str, Any]:
    return {"status": "ok", "models": list(gateway.settings.models), "mode": gateway.mode}


@router.get("/metrics", responses={200: {"content": {"text/plain": {}}}})
def metrics(gateway: GatewayDep) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    return Response(gateway.metrics.render(), media_type=CONTENT_TYPE_LATEST)
