"""Every HTTP service's FastAPI app, built in this process as its factory builds it (the
gateway on the tiny model, the orchestrator on an in-memory broker), for tests that speak
to the real apps over ASGI: the fuzzers and the JSON-boundary tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.tiny_llm import tiny_gateway_settings

SERVICES = ("llm_gateway", "orchestrator", "learner", "annotator")


def gateway_app(tiny_model_dir: Path, tmp_path: Path) -> Any:
    from llmrl.llm_gateway.gateway import Gateway
    from llmrl.llm_gateway.rest import create_app

    config = tiny_gateway_settings(
        tiny_model_dir,
        cache={"backend": "sqlite", "sqlite_path": str(tmp_path / "cache.sqlite")},
    )
    config["ledger"] = {"backend": "sqlite", "sqlite_path": str(tmp_path / "ledger.sqlite")}
    config["models"]["tiny"]["max_context_tokens"] = 48  # generated max_tokens stay cheap
    config["limits"] = {"max_prompt_tokens": 256, "max_embed_chars": 2000}
    return create_app(Gateway(config, mode="embedded"))


def orchestrator_app(tmp_path: Path) -> Any:
    from llmrl.common.queues import make_broker
    from llmrl.common.store import RunStore
    from llmrl.orchestrator.manager import RunManager
    from llmrl.orchestrator.service import create_app

    store = RunStore(tmp_path / "orchestrator.sqlite")
    manager = RunManager(store, make_broker(None), tmp_path, simulator=None, llm_gateway=None)
    return create_app(manager, token=None, max_body_bytes=1 << 20)


def learner_app(tmp_path: Path) -> Any:
    from llmrl.learner.service import create_app

    return create_app(tmp_path / "learner-jobs")


def annotator_app(tmp_path: Path) -> Any:
    from llmrl.annotator.service import create_app

    return create_app(tmp_path / "annotator-jobs", learner_url="http://127.0.0.1:9")


def service_apps(tiny_model_dir: Path, home: Path) -> dict[str, Any]:
    """Each service's app by name (`SERVICES`), its state under `home`."""
    return {
        "llm_gateway": gateway_app(tiny_model_dir, home),
        "orchestrator": orchestrator_app(home),
        "learner": learner_app(home),
        "annotator": annotator_app(home),
    }
