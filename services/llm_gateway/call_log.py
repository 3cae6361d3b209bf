"""Each run's LLM calls, kept beside its ledger totals: what `llmrl runs export` bundles.

For every call of a run the gateway keeps one record: the cache key, the operation, the model
(as the caller named it), the request as the gateway hashed it (`cache.key_document`) and the
answer it returned, whether the cache served it or a model computed it. A deterministic call
(temperature 0, or a seed) is kept once per run and key: asked again, it has the same answer.
A sampled call (temperature > 0 without a seed) is kept at every occurrence, in order, since
each one may have answered differently. The gateway's settings that decide answers and costs
(default models, each model's backend, source and price, the cache's kind) are kept once per
run.

Records are written behind, with the ledger's totals (`Ledger.flush`): into the ledger's
SQLite file (tables `calls` and `call_settings`) or its Redis keys. The catch-all run
"default" and issued keys' spending (`key:<id>`) are not runs and keep no calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmrl.llm_gateway.keys import RUN_PREFIX as KEY_RUN_PREFIX

DEFAULT_RUN = "default"


@dataclass
class CallRecord:
    key: str  # the cache key: SHA-256 of `request`'s canonical JSON
    op: str  # chat, completion, score or embed
    model: str  # the gateway's label: <model> or <model>:<adapter>@<version>
    request: dict[str, Any]  # the key document (`cache.key_document`)
    answer: dict[str, Any]  # what the gateway returned (the cache's payload)
    sampled: bool = False  # temperature > 0 without a seed: each occurrence kept, in order
    cached: bool = False  # the cache served it (the run's first ask of this key)

    def to_dict(self) -> dict[str, Any]:
        # shallow: the request document and the answer are never changed once answered (the
        # cache holds the same answer); `asdict`'s deep copy was ~5% of a cache miss's CPU
        return {
            "key": self.key,
            "op": self.op,
            "model": self.model,
            "request": self.request,
            "answer": self.answer,
            "sampled": self.sampled,
            "cached": self.cached,
        }


def records_calls(run_id: Any) -> bool:
    """Whether calls under `run_id` are a run's (kept) rather than unattributed traffic."""
    return (
        isinstance(run_id, str)
        and bool(run_id)
        and run_id != DEFAULT_RUN
        and not run_id.startswith(KEY_RUN_PREFIX)
    )


def settings_note(settings: Any, cache_backend: str) -> dict[str, Any]:
    """What of the gateway's settings decides a run's answers and costs, for its bundle:
    the default models, the cache's kind and each configured model's settings and price
    (storage locations and URLs of the cache and ledger are left out)."""
    models = {}
    for name, config in settings.models.items():
        price = settings.price(name)
        models[name] = {
            **config.model_dump(mode="json"),
            "price": {"prompt": price.prompt, "completion": price.completion},
        }
    return {
        "default_model": settings.default_model,
        "default_embedding_model": settings.default_embedding_model,
        "cache": {"backend": cache_backend, "share": settings.cache.share},
        "models": models,
    }
