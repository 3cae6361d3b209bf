"""Log-probabilities in OpenAI's legacy completions shape: `echo` + `logprobs` on
`/v1/completions`, which serving engines (vLLM, llama-cpp-python, another llmrl gateway) answer
with the prompt's token log-probs, and which the `openai` backend scores through.

Two sides:
- a local `hf` model answers such a completion (`complete`): each token's own log-prob,
  computed on the model's thread by the model's own scorer (a `ScoreJob` of the sequence's
  first token and the rest, through the backend's batcher: the same passes, adapters,
  cancellation and batch invariance as `/v1/score`), with the answer generated first by the
  backend when `max_tokens` > 0. `logprobs` 0 only: the top alternatives at each position
  need the whole distribution, which the scorer does not return;
- the tokenizer helpers the `openai` backend scores with when its settings name the model's
  tokenizer (`load_tokenizer`, `encode`, `chat_prompt`: as the local model tokenizes), and
  the text pieces and offsets of tokens (`token_pieces`).

Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from llmrl.llm_gateway.api_types import GenerateRequest
from llmrl.llm_gateway.errors import InvalidRequestError

if TYPE_CHECKING:
    from llmrl.llm_gateway.backends.base import Backend, Generation

REPLACEMENT = "\ufffd"  # what a token holding part of a UTF-8 character decodes to alone


# -- tokens as text ------------------------------------------------------------------------------
def load_tokenizer(spec: str) -> Any:
    """A Hugging Face tokenizer from a local directory or a `builtin:` name (local_models)."""
    from transformers import AutoTokenizer

    from llmrl.llm_gateway.local_models import resolve_path

    return AutoTokenizer.from_pretrained(resolve_path(spec))


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of `text` without special tokens, as the local model encodes (a prompt and
    each candidate apart, then concatenated)."""
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def chat_prompt(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """A chat rendered as the local model renders it (`LocalCausalLM.chat_prompt`)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    lines = [f"{m['role']}: {m['content']}" for m in messages]
    return "\n".join([*lines, "assistant:"])


def token_pieces(tokenizer: Any, ids: list[int]) -> list[str]:
    """The text each token adds to the sequence's decoded text, decoded with a few tokens of
    context (a leading space or a character split over tokens comes out where it belongs): the
    pieces join into the decoded text. A token ending inside a character adds "" and the
    token that completes it the whole character."""
    pieces: list[str] = []
    prefix, read = 0, 0  # decode ids[prefix:] and keep what follows ids[prefix:read]'s text
    for i in range(len(ids)):
        before = tokenizer.decode(ids[prefix:read], skip_special_tokens=False)
        after = tokenizer.decode(ids[prefix : i + 1], skip_special_tokens=False)
        if len(after) > len(before) and not after.endswith(REPLACEMENT):
            pieces.append(after[len(before) :])
            prefix, read = read, i + 1
        else:
            pieces.append("")
    return pieces


def legacy_logprobs(
    pieces: list[str], values: list[float | None], start: int, first_offset: int
) -> dict[str, Any]:
    """OpenAI's legacy `logprobs` of the tokens from index `start` of a sequence (`pieces`:
    every token's text; `values`: every token's log-prob, None for the first): tokens,
    token_logprobs, top_logprobs (each token alone, as vLLM answers `logprobs: 0`; None where
    its log-prob is) and text_offset (from `first_offset`, where the sequence's first token
    starts in the answer's text)."""
    offsets, offset = [], first_offset
    for piece in pieces:
        offsets.append(offset)
        offset += len(piece)
    tokens = pieces[start:]
    token_logprobs = values[start:]
    return {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": [
            None if value is None else {token: value}
            for token, value in zip(tokens, token_logprobs, strict=True)
        ],
        "text_offset": offsets[start:],
    }


# -- a local model answering ---------------------------------------------------------------------
def serves(backend: Backend) -> bool:
    """Whether `complete` serves this backend: a local transformers model (`hf`)."""
    from llmrl.llm_gateway.backends.transformers_local import TransformersBackend

    return isinstance(backend, TransformersBackend)


def not_served(backend: Backend, request: GenerateRequest) -> InvalidRequestError:
    field = _asked_field(request)
    return InvalidRequestError(
        f"{field}: model {backend.name!r} (backend {backend.config.backend!r}) returns no "
        "log-probabilities, echo or token-id prompts; use a local model (backend 'hf') or an "
        "OpenAI-compatible endpoint (backend 'openai') that serves them",
        field,
    )


def _asked_field(request: GenerateRequest) -> str:
    if request.logprobs is not None:
        return "logprobs"
    return "echo" if request.echo else "prompt"


def complete(backend: Any, request: GenerateRequest, adapter: str, timeout_s: float) -> Generation:
    """A plain completion on a local `hf` model with OpenAI's legacy extras: the prompt given
    as token ids, `echo` (the answer's text starts with the prompt) and `logprobs` 0 (each
    token's own log-prob: the prompt's first has none). The answer, when `max_tokens` > 0, is
    generated by the backend as any completion, then its text encoded again (as a candidate
    is) and scored after the prompt: a generated token that its text encodes otherwise is
    reported as the text encodes."""
    from llmrl.llm_gateway.backends.base import Generation

    deadline = time.monotonic() + timeout_s
    lm = backend.lm
    if request.logprobs not in (None, 0):
        raise InvalidRequestError(
            f"logprobs: model {backend.name!r} (backend 'hf') returns each token's own "
            f"log-probability only: ask logprobs 0 (got {request.logprobs}); the "
            f"{request.logprobs} most likely tokens at each position are not computed here",
            "logprobs",
        )
    if isinstance(request.prompt, list):
        if request.max_tokens > 0:
            raise InvalidRequestError(
                f"prompt: model {backend.name!r} (backend 'hf') takes a prompt of token ids "
                "for its log-probs only (echo with max_tokens 0); generate from a text prompt",
                "prompt",
            )
        prompt_ids = list(request.prompt)
        vocabulary = int(lm.model.config.vocab_size)
        for i, token in enumerate(prompt_ids):
            if token >= vocabulary:
                raise InvalidRequestError(
                    f"prompt[{i}]: token id {token} is not in model {backend.name!r}'s "
                    f"vocabulary of {vocabulary}",
                    f"prompt[{i}]",
                )
    else:
        prompt_ids = lm.encode(request.prompt or "")
        if not prompt_ids:
            raise InvalidRequestError("prompt encodes to no tokens", "prompt")
    limit = backend.config.max_context_tokens
    if len(prompt_ids) + request.max_tokens > limit:
        raise InvalidRequestError(
            f"max_tokens: the request needs {len(prompt_ids) + request.max_tokens} tokens but "
            f"model {backend.name!r} allows {limit} (prompt + max_tokens)",
            "max_tokens",
        )
    if adapter:
        backend.adapters.path(adapter)  # an unknown adapter fails here, not in the model thread

    n = request.n
    if request.max_tokens > 0:
        plain = dataclasses.replace(request, logprobs=None, echo=False)
        generated = backend.generate(plain, adapter, timeout_s)
        texts, reasons = list(generated.texts), list(generated.finish_reasons)
        completion_tokens = generated.completion_tokens
    else:
        texts, reasons, completion_tokens = [""] * n, ["length"] * n, 0

    logprobs: list[dict[str, Any]] | None = None
    prompt_pieces = token_pieces(lm.tokenizer, prompt_ids)
    prompt_text = request.prompt if isinstance(request.prompt, str) else "".join(prompt_pieces)
    if request.logprobs is not None:
        answers: dict[str, dict[str, Any]] = {}  # greedy rows repeat one text: scored once
        for text in texts:
            if text not in answers:
                answers[text] = _scored(backend, prompt_ids, text, request, adapter, deadline)
        logprobs = [answers[text] for text in texts]
    if request.echo:
        texts = [prompt_text + text for text in texts]
    return Generation(texts, len(prompt_ids), completion_tokens, reasons, logprobs)


def _scored(
    backend: Any,
    prompt_ids: list[int],
    text: str,
    request: GenerateRequest,
    adapter: str,
    deadline: float,
) -> dict[str, Any]:
    """The legacy logprobs of one answer: the prompt's tokens too with `echo`."""
    lm = backend.lm
    answer_ids = lm.encode(text) if text else []
    sequence = prompt_ids + answer_ids
    values: list[float | None] = [None]
    if len(sequence) > 1:
        values.extend(_sequence_logprobs(backend, sequence, adapter, deadline, request))
    pieces = token_pieces(lm.tokenizer, sequence)
    if request.echo:
        return legacy_logprobs(pieces, values, 0, 0)
    # without echo: the answer's tokens, at their offsets after the prompt's text
    prompt_chars = len("".join(pieces[: len(prompt_ids)]))
    result = legacy_logprobs(pieces, values, len(prompt_ids), 0)
    if isinstance(request.prompt, str):  # offsets count from the prompt as sent
        shift = len(request.prompt) - prompt_chars
        result["text_offset"] = [offset + shift for offset in result["text_offset"]]
    return result


def _sequence_logprobs(
    backend: Any, sequence: list[int], adapter: str, deadline: float, request: GenerateRequest
) -> list[float]:
    """Each token's log-prob after the ones before it (from the second on), computed by the
    model's scorer on its thread: its first token as the prompt, the rest as one candidate."""
    from llmrl.llm_gateway.local_causal_lm import ScoreJob

    job = ScoreJob(sequence[:1], [sequence[1:]], request.abandoned)
    future = backend.batcher.submit("score", (adapter,), job)
    # the backend's own wait: a queued job dropped, a running one stopped after its pass in
    # progress, when the request's deadline passes or its caller leaves
    rows = backend._wait(future, max(0.0, deadline - time.monotonic()), request.abandoned)
    return [float(value) for value in rows[0]]
