"""Issued keys: POST /v1/keys (a budget in USD, an optional expiry and models, its own rate
limits `max_concurrent` and `tokens_per_minute` (else the gateway's `limits.key_*`); the answer
holds the key, shown this once), GET /v1/keys (ids, budgets, spend, expiry, revoked, the
limits in force; never a key),
DELETE /v1/keys/{key_id} (revokes it). These need the shared service token: a request made
with an issued key is refused before it gets here (`key_auth`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from llmrl.common.bounds import MAX_INT64, MAX_USD
from llmrl.llm_gateway.errors import InvalidRequestError
from llmrl.llm_gateway.gateway import MAX_KEY_LIFETIME_S
from llmrl.llm_gateway.rest_requests import GatewayDep, declared_body, json_body
from llmrl.llm_gateway.settings import MAX_CONCURRENT

router = APIRouter()
LIMIT: dict[str, Any] = {"type": ["integer", "null"], "minimum": 1}  # null: the gateway's
FIELDS = ("budget_usd", "expires_in_s", "models", "name", "max_concurrent", "tokens_per_minute")


@router.post(
    "/v1/keys",
    status_code=201,
    openapi_extra=declared_body(
        {
            "budget_usd": {"type": "number", "minimum": 0, "maximum": MAX_USD},
            "expires_in_s": {
                "type": ["number", "null"],
                "exclusiveMinimum": 0,
                "maximum": MAX_KEY_LIFETIME_S,
            },
            "models": {"type": ["array", "null"], "items": {"type": "string"}},
            "name": {"type": "string", "maxLength": 200},
            "max_concurrent": LIMIT | {"maximum": MAX_CONCURRENT},
            "tokens_per_minute": LIMIT | {"maximum": MAX_INT64},
        },
        ("budget_usd",),
    ),
)
async def create_key(request: Request, gateway: GatewayDep) -> dict[str, Any]:
    body = await json_body(request)
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise InvalidRequestError(
            f"unknown key fields {unknown}; allowed: {', '.join(FIELDS)}", unknown[0]
        )
    if "budget_usd" not in body:
        raise InvalidRequestError("budget_usd is required (USD the key may spend)", "budget_usd")
    record, key = gateway.create_key(
        body["budget_usd"], body.get("expires_in_s"), body.get("models"), body.get("name") or "",
        max_concurrent=body.get("max_concurrent"), tokens_per_minute=body.get("tokens_per_minute"),
    )  # fmt: skip
    return {**record.public(), "key": key}


@router.get("/v1/keys")
def list_keys(gateway: GatewayDep) -> dict[str, Any]:
    return {"object": "list", "data": gateway.key_rows()}


@router.delete("/v1/keys/{key_id}")
def revoke_key(key_id: str, gateway: GatewayDep) -> dict[str, Any]:
    return gateway.revoke_key(key_id).public()
