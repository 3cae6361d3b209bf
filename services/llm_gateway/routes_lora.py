"""vLLM's runtime LoRA API: POST /v1/load_lora_adapter {"lora_name", "lora_path"} and POST
/v1/unload_lora_adapter {"lora_name"} (`llmrl.llm_gateway.runtime_adapters`), answered as vLLM
answers them (200 with a line of text; errors in OpenAI's shape, 400 naming the field, 404 for
a name not loaded). Behind the service token like every route; an issued key may not call
them (`key_auth.KEY_PATHS`: keys only use models)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from llmrl.llm_gateway.rest_requests import STRING, GatewayDep, declared_body, in_thread, json_body

router = APIRouter()


@router.post(
    "/v1/load_lora_adapter",
    openapi_extra=declared_body(
        {"lora_name": STRING, "lora_path": STRING, "model": STRING}, ("lora_name", "lora_path")
    ),
)
async def load_lora_adapter(request: Request, gateway: GatewayDep) -> PlainTextResponse:
    body = await json_body(request)
    # `model` (the base model; default: the gateway's default) is ours: vLLM serves one base
    name = await in_thread(
        gateway.load_lora_adapter, body.get("lora_name"), body.get("lora_path"), body.get("model")
    )
    return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")


@router.post(
    "/v1/unload_lora_adapter",
    openapi_extra=declared_body({"lora_name": STRING}, ("lora_name",)),
)
async def unload_lora_adapter(request: Request, gateway: GatewayDep) -> PlainTextResponse:
    body = await json_body(request)
    name = await in_thread(gateway.unload_lora_adapter, body.get("lora_name"))
    return PlainTextResponse(f"Success: LoRA adapter '{name}' removed successfully.")
