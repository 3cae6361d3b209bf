"""The ledger and budgets: GET /v1/usage/{run_id} (a run's totals, per tag too) and
PUT /v1/budgets/{run_id} ({"usd": .., "calls": ..}; an unset field means no cap)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from llmrl.llm_gateway.errors import InvalidRequestError
from llmrl.llm_gateway.rest_requests import GatewayDep, json_body

router = APIRouter()


@router.get("/v1/usage/{run_id}")
def usage(run_id: str, gateway: GatewayDep) -> dict[str, Any]:
    return gateway.usage(run_id)


@router.put("/v1/budgets/{run_id}")
async def set_budget(run_id: str, request: Request, gateway: GatewayDep) -> dict[str, Any]:
    body = await json_body(request)
    unknown = set(body) - {"usd", "calls"}
    if unknown:
        raise InvalidRequestError(
            f"unknown budget fields {sorted(unknown)}; allowed: usd, calls", sorted(unknown)[0]
        )
    gateway.set_budget(run_id, body.get("usd"), body.get("calls"))
    return gateway.usage(run_id)
