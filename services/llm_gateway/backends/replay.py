"""`replay`: a recorded run's answers, from its bundle, with no model behind them.

`llmrl replay` serves every model name the recorded run used with this backend. Each request
is hashed as the run's gateway hashed it (the recorded backend's name and model identity,
the adapter, every parameter: `cache.cache_key`) and answered with the bundle's answer to that
key: a deterministic call every time, a sampled call without a seed with its recorded answers
in order. A request the bundle has no answer for fails with `ReplayMissError`, naming the model,
the operation and the start of the prompt. No weights, tokenizer or provider is ever loaded.
"""

from __future__ import annotations

import base64
from typing import Literal

import numpy as np
from pydantic import Field

from llmrl.common.registry import registry
from llmrl.llm_gateway.api_types import GenerateRequest, ScoreRequest
from llmrl.llm_gateway.backends.base import Backend, Embeddings, Generation, Scores
from llmrl.llm_gateway.cache import SHARED_NAMESPACE
from llmrl.llm_gateway.replay_bundle import CallIndex, bundle_index
from llmrl.llm_gateway.settings import GatewaySettings, ModelConfig


class ReplayModelConfig(ModelConfig):
    """A model answered from a replay bundle (`backend: replay`)."""

    backend: Literal["replay"] = "replay"
    bundle: str = Field(
        description="the bundle file `llmrl replay` was given (a path on the command line, "
        "never one a bundle names)"
    )

    def source(self, name: str) -> str:
        return f"replay of {self.bundle}"


@registry.register_backend("replay", description="A recorded run's answers (llmrl replay)")
class ReplayBackend(Backend):
    ops = frozenset({"chat", "completion", "score", "embed"})
    settings_model = ReplayModelConfig
    guided_decoding = True  # the recorded answers were guided already; the key holds the guide
    config: ReplayModelConfig

    def __init__(self, name: str, config: ReplayModelConfig, settings: GatewaySettings) -> None:
        super().__init__(name, config, settings)
        self.index: CallIndex = bundle_index(config.bundle)
        # the name and identity the run's gateway put in this model's keys
        pairs = self.index.identities.get(name) or [("replay", f"replay:{name}")]
        self._key_name, self._identity = pairs[0]

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def key_name(self) -> str:
        return self._key_name

    def _op(self, request: GenerateRequest | ScoreRequest) -> str:
        return request.op if isinstance(request, GenerateRequest) else "score"

    def prompt_tokens(self, request: GenerateRequest | ScoreRequest) -> int:
        """The recorded answer's prompt tokens (0 when there is none: the call then fails)."""
        _, _, adapter = (request.model or self.name).partition(":")
        keys = self.index.keys(
            self.name, self._op(request), adapter, request.cache_namespace, request.key_params()
        )
        answer = self.index.peek(keys)
        return int(answer["prompt_tokens"]) if answer else 0

    def score_shape(self, request: ScoreRequest) -> tuple[int, int]:
        return 0, 0  # the recorded run's gateway held the request to its limits already

    def generate(self, request: GenerateRequest, adapter: str, timeout_s: float) -> Generation:
        answer = self.index.take(
            self.name, request.op, adapter, request.cache_namespace, request.key_params(),
            sampled=request.sampled,
        )  # fmt: skip
        return Generation(
            texts=list(answer["texts"]),
            prompt_tokens=int(answer["prompt_tokens"]),
            completion_tokens=int(answer["completion_tokens"]),
            finish_reasons=list(answer.get("finish_reasons", [])),
        )

    def score(self, request: ScoreRequest, adapter: str, timeout_s: float) -> Scores:
        answer = self.index.take(
            self.name, "score", adapter, request.cache_namespace, request.key_params(),
            sampled=False,
        )  # fmt: skip
        rows = [[float(v) for v in row] for row in answer["token_logprobs"]]
        # the gateway adds the candidates' tokens to the prompt's, as the recorded run's did
        prompt = int(answer["prompt_tokens"]) - sum(len(row) for row in rows)
        return Scores(token_logprobs=rows, prompt_tokens=prompt)

    def embed(self, texts: list[str], timeout_s: float) -> Embeddings:
        # in-process callers (an embedded run, which a replay is) use the shared namespace
        answer = self.index.take(
            self.name, "embed", "", SHARED_NAMESPACE, {"texts": texts}, sampled=False
        )
        vectors = np.frombuffer(base64.b64decode(answer["vectors"]), dtype=np.float32)
        return Embeddings(vectors.reshape(answer["shape"]).copy(), int(answer["prompt_tokens"]))
