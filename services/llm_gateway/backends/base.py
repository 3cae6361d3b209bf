"""What every backend implements (the provider boundary, in the style of LiteLLM's
per-provider transformation classes: a request in, a response out, nothing else)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from llmrl.common.threads import stated_thread_count
from llmrl.llm_gateway.api_types import GenerateRequest, ScoreRequest
from llmrl.llm_gateway.errors import UnsupportedOperationError
from llmrl.llm_gateway.settings import GatewaySettings, ModelConfig


@dataclass
class Generation:
    texts: list[str]
    prompt_tokens: int
    completion_tokens: int
    finish_reasons: list[str] = field(default_factory=list)
    # per text, OpenAI's legacy {tokens, token_logprobs, top_logprobs, text_offset} when the
    # request asked for logprobs (`complete_logprobs`)
    logprobs: list[dict[str, Any]] | None = None


@dataclass
class Scores:
    token_logprobs: list[list[float]]
    prompt_tokens: int


@dataclass
class Embeddings:
    vectors: np.ndarray  # float32 [n, dim]
    prompt_tokens: int


class Backend:
    """One configured model served by one provider kind.

    `ops` lists what it can do among chat, completion, score and embed; `remote` backends are
    retried by the gateway on 429/5xx/timeouts, local ones are not (their failures repeat);
    `guided_decoding` backends constrain an answer's lines to given choices.
    """

    ops: ClassVar[frozenset[str]] = frozenset()
    # the backend's own settings (a ModelConfig subclass): validated where the config loads
    settings_model: ClassVar[type[ModelConfig]] = ModelConfig
    remote: ClassVar[bool] = False
    guided_decoding: ClassVar[bool] = False  # honours GenerateRequest.guided_lines

    def __init__(self, name: str, config: ModelConfig, settings: GatewaySettings) -> None:
        self.name = name
        self.config = config
        self.settings = settings
        # torch threads a local model computes on, in every mode (`stated_thread_count`)
        self.threads = stated_thread_count(settings.torch_threads)

    @classmethod
    def ops_for(cls, config: ModelConfig) -> frozenset[str]:
        """What a model with these settings can do: `ops`, unless a setting adds one (an
        `openai` endpoint marked `score: true` scores)."""
        return cls.ops

    @property
    def identity(self) -> str:
        """What makes this model's answers what they are (goes into cache keys)."""
        return f"{self.config.backend}:{self.config.source(self.name) or self.name}"

    @property
    def key_name(self) -> str:
        """The backend's name in cache keys: its registered name (a replay of a recorded run
        answers under the recorded backend's, so that its keys are the run's)."""
        return self.config.backend

    def prompt_tokens(self, request: GenerateRequest | ScoreRequest) -> int:
        """Tokens of the request's prompt (an upper bound where counting is not exact); used
        to reserve budget before the call. Score requests include their candidates."""
        raise self._unsupported("count_tokens")

    def count_tokens(self, text: str) -> int:
        raise self._unsupported("count_tokens")

    def score_shape(self, request: ScoreRequest) -> tuple[int, int]:
        """(prompt tokens, the longest candidate's tokens) of a score request: what the
        gateway's compute cap for scoring (`limits.max_score_tokens`) counts."""
        raise self._unsupported("score")

    def generate(self, request: GenerateRequest, adapter: str, timeout_s: float) -> Generation:
        raise self._unsupported(request.op)

    def serves_async(self, request: GenerateRequest, adapter: str) -> bool:
        """Whether `agenerate` serves this request from an event loop (the REST routes then
        run it there, with no hop to a worker thread); False: `generate` in a thread."""
        return False

    async def agenerate(
        self, request: GenerateRequest, adapter: str, timeout_s: float
    ) -> Generation:
        raise self._unsupported(request.op)

    def score(self, request: ScoreRequest, adapter: str, timeout_s: float) -> Scores:
        raise self._unsupported("score")

    def complete_logprobs(
        self, request: GenerateRequest, adapter: str, timeout_s: float
    ) -> Generation:
        """A plain completion that asks for log-probs, an echo or takes token ids
        (`request.wants_logprobs`), answered with `Generation.logprobs`. A local model
        holding a `LocalCausalLM` (`hf`) is served by `llmrl.llm_gateway.prompt_logprobs`;
        other backends refuse unless they override this."""
        from llmrl.llm_gateway import prompt_logprobs

        if prompt_logprobs.serves(self):
            return prompt_logprobs.complete(self, request, adapter, timeout_s)
        raise prompt_logprobs.not_served(self, request)

    def embed(self, texts: list[str], timeout_s: float) -> Embeddings:
        raise self._unsupported("embed")

    def close(self) -> None:
        """Release threads and connections."""

    def _unsupported(self, op: str) -> UnsupportedOperationError:
        return self._unsupported_op(self.name, self.config.backend, op, self.ops_for(self.config))

    @classmethod
    def _unsupported_op(
        cls, name: str, backend: str, op: str, ops: frozenset[str] | None = None
    ) -> UnsupportedOperationError:
        return UnsupportedOperationError(
            f"model {name!r} (backend {backend!r}) does not support {op}; "
            f"it supports: {', '.join(sorted(cls.ops if ops is None else ops))}",
            "model",
        )


def utf8_token_bound(texts: list[str], per_text_overhead: int = 8) -> int:
    """An upper bound on tokens for text we cannot tokenize exactly (remote models): a BPE
    token covers at least one byte, plus a few tokens of chat framing per message."""
    return sum(len(t.encode()) + per_text_overhead for t in texts)
