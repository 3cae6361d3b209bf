"""Requests and results of the gateway's operations, and the checks every request passes.

The same dataclasses serve the in-process client, the gRPC service and the REST API, so a
request is validated once, in one place, whatever door it came through. Every check raises
`InvalidRequestError` naming the field and what is allowed.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from llmrl.llm_gateway.errors import InvalidRequestError

CachePolicy = Literal["auto", "bypass", "always"]
CACHE_POLICIES: tuple[str, ...] = ("auto", "bypass", "always")
ROLES = ("system", "user", "assistant")
MAX_N = 16
MAX_STOP = 4
MAX_TOKENS_LIMIT = 8192
MAX_GUIDED_CHOICES = 4096
MAX_GUIDED_LINES = 64
MAX_LOGPROBS = 20  # top alternatives per token a completion may ask for (vLLM's default cap)
MAX_TOKEN_ID = 2**31 - 1


def cache_policy(value: bool | str) -> CachePolicy:
    """`True` → "auto" (deterministic requests only), `False` → "bypass", or a policy name."""
    if value is True:
        return "auto"
    if value is False:
        return "bypass"
    if value in CACHE_POLICIES:
        return value  # type: ignore[return-value]
    raise InvalidRequestError(
        f"cache must be true, false or one of {', '.join(CACHE_POLICIES)}; got {value!r}", "cache"
    )


def normalize_messages(messages: Any, field_name: str = "messages") -> list[dict[str, str]]:
    """Check a chat prompt: a non-empty list of {role, content}, system messages first, the
    last one from the user. A bare string is taken as one user message."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    if not isinstance(messages, list | tuple) or not messages:
        raise InvalidRequestError(
            f"{field_name} must be a non-empty list of {{role, content}} messages", field_name
        )
    result: list[dict[str, str]] = []
    seen_non_system = False
    for i, message in enumerate(messages):
        where = f"{field_name}[{i}]"
        if not isinstance(message, dict):
            raise InvalidRequestError(f"{where} must be an object with role and content", where)
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise InvalidRequestError(
                f"{where}.role must be one of {', '.join(ROLES)}; got {role!r}", f"{where}.role"
            )
        if not isinstance(content, str):
            raise InvalidRequestError(f"{where}.content must be a string", f"{where}.content")
        if role == "system" and seen_non_system:
            raise InvalidRequestError(
                f"{where}: system messages must come before every user/assistant message",
                where,
            )
        seen_non_system = seen_non_system or role != "system"
        result.append({"role": role, "content": content})
    if result[-1]["role"] != "user":
        raise InvalidRequestError(
            f"{field_name}: the last message must have role 'user', got {result[-1]['role']!r}",
            f"{field_name}[{len(result) - 1}].role",
        )
    return result


def _check_number(
    name: str, value: Any, low: float, high: float, *, integer: bool = False, low_open=False
) -> None:
    ok_type = isinstance(value, int) if integer else isinstance(value, int | float)
    # isfinite only of floats: a huge int (10**400) overflows the conversion; the range says no
    nonfinite = isinstance(value, float) and not math.isfinite(value)
    if isinstance(value, bool) or not ok_type or nonfinite:
        kind = "an integer" if integer else "a number"
        raise InvalidRequestError(f"{name} must be {kind}; got {value!r}", name)
    if value < low or value > high or (low_open and value == low):
        bracket = "(" if low_open else "["
        raise InvalidRequestError(f"{name} must be in {bracket}{low}, {high}]; got {value!r}", name)


GUIDED_GRAMMAR = 2  # the version of `guided.LineAutomaton`'s grammar, part of cache keys


@dataclass
class GuidedLines:
    """Guided decoding: every line of the answer is one of `choices`.

    With `numbered`, line i is written "i. <choice>" (a numbered plan). The answer ends after
    any complete line, or after `max_lines` lines (None: as many as `max_tokens` allow); it
    has at least one line. vLLM's `guided_choice` is the case numbered=False, max_lines=1.
    """

    choices: list[str]
    numbered: bool = False
    max_lines: int | None = None

    @classmethod
    def from_value(cls, value: Any, field_name: str = "guided_lines") -> GuidedLines:
        """Read {choices, numbered, max_lines} (a dict, or a GuidedLines) and check it."""
        if isinstance(value, GuidedLines):
            value = {"choices": value.choices, "numbered": value.numbered,
                     "max_lines": value.max_lines}  # fmt: skip
        if not isinstance(value, dict):
            raise InvalidRequestError(
                f"{field_name} must be an object {{choices, numbered, max_lines}}", field_name
            )
        unknown = set(value) - {"choices", "numbered", "max_lines"}
        if unknown:
            raise InvalidRequestError(
                f"{field_name}: unknown keys {sorted(unknown)}; allowed: choices, numbered, "
                "max_lines",
                field_name,
            )
        choices = value.get("choices")
        where = f"{field_name}.choices"
        if not isinstance(choices, list | tuple) or not choices:
            raise InvalidRequestError(f"{where} must be a non-empty list of strings", where)
        if len(choices) > MAX_GUIDED_CHOICES:
            raise InvalidRequestError(
                f"{where}: at most {MAX_GUIDED_CHOICES} choices; got {len(choices)}", where
            )
        for i, choice in enumerate(choices):
            if not isinstance(choice, str) or not choice.strip() or "\n" in choice:
                raise InvalidRequestError(
                    f"{where}[{i}] must be a non-empty string without line breaks; got {choice!r}",
                    f"{where}[{i}]",
                )
        numbered = value.get("numbered", False)
        if not isinstance(numbered, bool):
            raise InvalidRequestError(f"{field_name}.numbered must be true or false",
                                      f"{field_name}.numbered")  # fmt: skip
        max_lines = value.get("max_lines")
        if max_lines is not None:
            _check_number(f"{field_name}.max_lines", max_lines, 1, MAX_GUIDED_LINES, integer=True)
        # duplicates change nothing; sorted so that the order never splits the cache
        return cls(sorted(set(choices)), numbered, max_lines)

    def key(self) -> dict[str, Any]:
        # grammar 2: any line may end the answer (1 forced a line break first); answers cached
        # under another grammar are not this request's answers
        return {
            "choices": self.choices,
            "numbered": self.numbered,
            "max_lines": self.max_lines,
            "grammar": GUIDED_GRAMMAR,
        }


@dataclass
class GenerateRequest:
    """A chat request (`messages`) or a plain completion (`prompt`: a text, or token ids of
    the model's tokenizer, as OpenAI's legacy completions take them).

    A plain completion may also ask for log-probabilities, as OpenAI's legacy API does:
    `logprobs` (each token's own, and the `logprobs` most likely at its position) of the
    answer's tokens and, with `echo`, of the prompt's (the answer's text then starts with the
    prompt); `max_tokens` 0 with `echo` computes only the prompt's (a scorer's request)."""

    messages: list[dict[str, str]] | None = None
    prompt: str | list[int] | None = None
    model: str | None = None
    run_id: str = "default"
    tag: str = ""
    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 128
    stop: list[str] | None = None
    seed: int | None = None
    cache: CachePolicy = "auto"
    timeout_s: float | None = None
    guided_lines: GuidedLines | None = None  # constrain the answer's lines (local models)
    logprobs: int | None = None  # plain completions: log-probs of the tokens (None: none)
    echo: bool = False  # plain completions: the prompt's tokens come back first (with logprobs)
    # whose cached answers this request may see (set by the REST layer from an issued key;
    # "": the shared namespace of service-token and in-process callers)
    cache_namespace: str = ""
    # whose limits and fair share the request counts against (set by the REST layer from an
    # issued key: "key:<id>"; "": the service token's and in-process callers)
    tenant: str = ""
    # set when the caller is gone (a REST client disconnected): local generation stops
    abandoned: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)

    @property
    def op(self) -> str:
        return "chat" if self.messages is not None else "completion"

    @property
    def sampled(self) -> bool:
        """Temperature > 0 without a seed: a different answer each time, so not cached (a
        prompt's log-probs alone, max_tokens 0, are the same every time)."""
        return self.temperature > 0 and self.seed is None and self.max_tokens > 0

    @property
    def wants_logprobs(self) -> bool:
        """A legacy completion beyond text in, text out: log-probs, the prompt echoed, or a
        prompt of token ids (`Backend.complete_logprobs` serves it)."""
        return self.logprobs is not None or self.echo or isinstance(self.prompt, list)

    def key_params(self) -> dict[str, Any]:
        """The parameters that decide the answer, as the cache key holds them."""
        params: dict[str, Any] = {
            "messages": self.messages,
            "prompt": self.prompt,
            "n": self.n,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "stop": sorted(self.stop or []),
            "seed": self.seed,
        }
        if self.guided_lines is not None:  # absent otherwise: older cache keys stay valid
            params["guided_lines"] = self.guided_lines.key()
        if self.logprobs is not None:  # absent otherwise, as guided_lines
            params["logprobs"] = self.logprobs
        if self.echo:
            params["echo"] = True
        return params

    def validate(self) -> GenerateRequest:
        if (self.messages is None) == (self.prompt is None):
            raise InvalidRequestError("give exactly one of messages or prompt", "messages")
        if self.messages is not None:
            self.messages = normalize_messages(self.messages)
        elif isinstance(self.prompt, list | tuple):
            self.prompt = _token_ids(self.prompt, "prompt")
        elif not isinstance(self.prompt, str):
            raise InvalidRequestError("prompt must be a string (or a list of token ids)", "prompt")
        _check_number("n", self.n, 1, MAX_N, integer=True)
        _check_number("temperature", self.temperature, 0.0, 2.0)
        _check_number("top_p", self.top_p, 0.0, 1.0, low_open=True)
        self._check_logprobs()
        # max_tokens 0: the prompt's log-probs alone (with echo), as OpenAI's legacy API
        _check_number("max_tokens", self.max_tokens, 0 if self.echo else 1, MAX_TOKENS_LIMIT,
                      integer=True)  # fmt: skip
        if self.seed is not None:
            _check_number("seed", self.seed, 0, 2**63 - 1, integer=True)
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if self.stop is not None:
            if not isinstance(self.stop, list) or not all(
                isinstance(s, str) and s for s in self.stop
            ):
                raise InvalidRequestError("stop must be a list of non-empty strings", "stop")
            if len(self.stop) > MAX_STOP:
                raise InvalidRequestError(f"stop allows at most {MAX_STOP} strings", "stop")
            self.stop = self.stop or None
        if self.guided_lines is not None:
            self.guided_lines = GuidedLines.from_value(self.guided_lines)
        self.cache = cache_policy(self.cache)
        _check_common(self.run_id, self.tag, self.timeout_s)
        return self

    def _check_logprobs(self) -> None:
        if not isinstance(self.echo, bool):
            raise InvalidRequestError(f"echo must be true or false; got {self.echo!r}", "echo")
        if self.logprobs is not None:
            _check_number("logprobs", self.logprobs, 0, MAX_LOGPROBS, integer=True)
        if self.messages is not None and (self.logprobs is not None or self.echo):
            name = "logprobs" if self.logprobs is not None else "echo"
            raise InvalidRequestError(
                f"{name}: chat completions return no log-probabilities here; ask /v1/completions "
                "(a plain prompt) with logprobs and echo",
                name,
            )


def _token_ids(value: list[Any] | tuple[Any, ...], field_name: str) -> list[int]:
    """A prompt given as token ids: a non-empty list of integers in [0, 2**31)."""
    if not value:
        raise InvalidRequestError(
            f"{field_name}: a list of token ids must not be empty", field_name
        )
    for i, token in enumerate(value):
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token <= MAX_TOKEN_ID:
            raise InvalidRequestError(
                f"{field_name}[{i}] must be a token id (an integer in [0, {MAX_TOKEN_ID}]); "
                f"got {token!r}",
                f"{field_name}[{i}]",
            )
    return list(value)


@dataclass
class ScoreRequest:
    """Log-probabilities of candidate continuations of one prompt (a string or a chat)."""

    prompt: str | list[dict[str, str]]
    candidates: list[str]
    model: str | None = None
    run_id: str = "default"
    tag: str = ""
    cache: CachePolicy = "auto"
    timeout_s: float | None = None
    cache_namespace: str = ""  # as GenerateRequest's
    tenant: str = ""  # as GenerateRequest's
    # set when the caller is gone (disconnect, cancelled RPC, timeout): local scoring stops
    # after its forward pass in progress, or never starts
    abandoned: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)

    def validate(self, max_candidates: int) -> ScoreRequest:
        if isinstance(self.prompt, list):
            self.prompt = normalize_messages(self.prompt, "prompt")
        elif not isinstance(self.prompt, str) or not self.prompt:
            raise InvalidRequestError("prompt must be a non-empty string or messages", "prompt")
        if not isinstance(self.candidates, list | tuple) or not self.candidates:
            raise InvalidRequestError(
                "candidates must be a non-empty list of strings", "candidates"
            )
        if len(self.candidates) > max_candidates:
            raise InvalidRequestError(
                f"candidates: at most {max_candidates} per request; got {len(self.candidates)}",
                "candidates",
            )
        for i, candidate in enumerate(self.candidates):
            if not isinstance(candidate, str) or not candidate:
                raise InvalidRequestError(
                    f"candidates[{i}] must be a non-empty string", f"candidates[{i}]"
                )
        self.candidates = list(self.candidates)
        self.cache = cache_policy(self.cache)
        _check_common(self.run_id, self.tag, self.timeout_s)
        return self

    def key_params(self) -> dict[str, Any]:
        """The parameters that decide the answer, as the cache key holds them."""
        return {"prompt": self.prompt, "candidates": self.candidates}


@dataclass
class EmbedRequest:
    texts: list[str]
    model: str | None = None
    run_id: str = "default"
    tag: str = ""
    cache: CachePolicy = "auto"
    timeout_s: float | None = None
    cache_namespace: str = ""  # as GenerateRequest's
    tenant: str = ""  # as GenerateRequest's

    def validate(self, max_texts: int) -> EmbedRequest:
        if isinstance(self.texts, str):
            self.texts = [self.texts]
        if not isinstance(self.texts, list | tuple) or not self.texts:
            raise InvalidRequestError("input must be a non-empty list of strings", "input")
        if len(self.texts) > max_texts:
            raise InvalidRequestError(
                f"input: at most {max_texts} texts per request; got {len(self.texts)}", "input"
            )
        for i, text in enumerate(self.texts):
            if not isinstance(text, str):
                raise InvalidRequestError(f"input[{i}] must be a string", f"input[{i}]")
        self.texts = list(self.texts)
        self.cache = cache_policy(self.cache)
        _check_common(self.run_id, self.tag, self.timeout_s)
        return self

    def key_params(self) -> dict[str, Any]:
        """The parameters that decide the answer, as the cache key holds them."""
        return {"texts": self.texts}


def _check_common(run_id: Any, tag: Any, timeout_s: Any) -> None:
    if not isinstance(run_id, str) or not run_id or len(run_id) > 200:
        raise InvalidRequestError("run_id must be a non-empty string (≤ 200 chars)", "run_id")
    if not isinstance(tag, str) or len(tag) > 200:
        raise InvalidRequestError("tag must be a string (≤ 200 chars)", "tag")
    if timeout_s is not None:
        _check_number("timeout_s", timeout_s, 0.0, 3600.0, low_open=True)


@dataclass
class ChatResult:
    texts: list[str]
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False
    latency_s: float = 0.0
    finish_reasons: list[str] = field(default_factory=list)
    # per choice, OpenAI's legacy shape {tokens, token_logprobs, top_logprobs, text_offset},
    # when the request asked for logprobs (None otherwise)
    logprobs: list[dict[str, Any]] | None = None

    @property
    def text(self) -> str:
        return self.texts[0]


@dataclass
class ScoreResult:
    logprobs: list[float]  # summed over each candidate's tokens
    token_logprobs: list[list[float]]
    model: str
    prompt_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False
    latency_s: float = 0.0


@dataclass
class EmbedResult:
    vectors: np.ndarray  # float32 [len(texts), dim]
    model: str
    prompt_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False
    latency_s: float = 0.0
