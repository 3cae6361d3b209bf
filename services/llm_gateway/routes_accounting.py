"""The ledger and budgets: GET /v1/usage/{run_id} (a run's totals, per tag too) and
PUT /v1/budgets/{run_id} ({"usd": .., "calls": ..}; an unset field means no cap)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from llmrl.common.bounds import MAX_INT64, MAX_USD
from llmrl.llm_gateway.errors import InvalidRequestError, InvalidValueError
from llmrl.llm_gateway.rest_requests import GatewayDep, declared_body, json_body

router = APIRouter()


@router.get("/v1/usage/{run_id}")
def usage(run_id: str, gateway: GatewayDep) -> dict[str, Any]:
    return gateway.usage(run_id)


@router.put(
    "/v1/budgets/{run_id}",
    openapi_extra=declared_body(
        {
            "usd": {"type": ["number", "null"], "minimum": 0, "maximum": MAX_USD},
            "calls": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_INT64},
        }
    ),
)
async def set_budget(run_id: str, request: Request, gateway: GatewayDep) -> dict[str, Any]:
    body = await json_body(request)
    unknown = set(body) - {"usd", "calls"}
    if unknown:
        raise InvalidRequestError(
            f"unknown budget fields {sorted(unknown)}; allowed: usd, calls", sorted(unknown)[0]
        )
    _check_type(body, "usd", (int, float), "a number of USD ≥ 0, or null")
    _check_type(body, "calls", (int,), "a whole number of calls ≥ 0, or null")
    gateway.set_budget(run_id, body.get("usd"), body.get("calls"))
    return gateway.usage(run_id)


def _check_type(body: dict[str, Any], field: str, types: tuple[type, ...], allowed: str) -> None:
    """A field of the wrong JSON type is a 422 naming it (booleans are not numbers here)."""
    value = body.get(field)
    if value is not None and (isinstance(value, bool) or not isinstance(value, types)):
        raise InvalidValueError(f"{field} must be {allowed}; got {value!r}", field)
