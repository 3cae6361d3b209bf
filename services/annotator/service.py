"""The annotator service, as far as it goes today: /health, /metrics and GET /info.

PLACEHOLDER. Datasets are built by the Python functions of `llmrl.annotator.datasets`
(called by recipes in-process); this service has no dataset or fine-tuning REST API yet.
GET /info says exactly what it offers. Later issues add the endpoints (episode logs in,
datasets and fine-tuning jobs out) here.
"""

from __future__ import annotations

from typing import Any

from llmrl.common.metrics import basic_app, serve_app

DESCRIPTION = "Turns episode logs into datasets. REST API: placeholder (health and metrics only)."
INFO = {
    "api": "placeholder",
    "endpoints": ["/health", "/metrics", "/info"],
    "dataset_api": "not implemented yet: recipes call llmrl.annotator.datasets in-process",
}


def create_app() -> Any:
    return basic_app("annotator", DESCRIPTION, INFO)


def serve(host: str, port: int, grpc_port: int | None, settings: dict[str, Any]) -> None:
    if settings:
        raise ValueError(f"the annotator service takes no settings yet, got {sorted(settings)}")
    serve_app(create_app(), "annotator", host, port)
