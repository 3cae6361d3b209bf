"""A long prompt's generation holds the model for at most one more prefill chunk once its
caller leaves, its deadline passes or the model closes: generation prefills a prompt in forward
passes of at most `score_forward_tokens` tokens on its KV cache and checks between them, as
scoring does. The chunked prefill gives the tokens of a whole one, and a prompt that fits one
chunk runs exactly as before (no chunk of its own).

Forward passes are counted with a pre-hook on the model (never wall-clock times). Before the
chunked prefill, the abandonment, deadline and closing tests failed: the first forward pass ran
the whole 601-token prompt.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from llmrl.llm_gateway.api_types import GenerateRequest, GuidedLines
from llmrl.llm_gateway.errors import GatewayTimeoutError
from llmrl.llm_gateway.local_causal_lm import GenJob, LocalCausalLM

FORWARD = 32  # score_forward_tokens: the most tokens one forward pass computes
LONG_PROMPT = "The door is locked. " * 120  # 601 tokens with SmolLM2's tokenizer
SHORT_PROMPT = "Next:"  # 2 tokens: with its max_tokens, every pass ends before position 16
SHORT_END = 16
GUIDED = GuidedLines(["go north", "open the door", "pick up the key"], numbered=True, max_lines=2)
WAIT_S = 30.0  # an upper bound for events that happen at once; never reached when all is well


@dataclass
class Forward:
    rows: int
    columns: int
    end: int  # the position after its last column (cached length + columns)
    after: bool  # started once the watched event was set (the caller had left)

    @property
    def tokens(self) -> int:
        return self.rows * self.columns


class ForwardSpy:
    """Records every forward pass of `model` (a pre-hook); optionally holds the first one until
    `hold_first_until` is set (so that the caller leaves while it runs)."""

    def __init__(self, model: Any, watch: threading.Event | None = None) -> None:
        self.calls: list[Forward] = []
        self.started = threading.Event()
        self.watch = watch or threading.Event()
        self.hold_first_until: threading.Event | None = None
        self.handle = model.register_forward_pre_hook(self._pre, with_kwargs=True)

    def _pre(self, _module: Any, _args: Any, kwargs: dict[str, Any]) -> None:
        ids = kwargs["input_ids"]
        cache = kwargs.get("past_key_values")
        cached = cache.get_seq_length() if cache is not None else 0
        rows, columns = ids.shape
        self.calls.append(Forward(rows, columns, cached + columns, self.watch.is_set()))
        first = not self.started.is_set()
        self.started.set()
        if first and self.hold_first_until is not None:
            assert self.hold_first_until.wait(WAIT_S)

    def long_calls(self) -> list[Forward]:
        """The passes of the long prompt (the short request's all end before SHORT_END)."""
        return [call for call in self.calls if call.end > SHORT_END]

    def remove(self) -> None:
        self.handle.remove()


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path) -> tuple[Any, Any]:
    """(model, tokenizer) of the tiny random Llama in float32."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    return model.eval(), tokenizer


def long_request() -> GenerateRequest:
    return GenerateRequest(model="tiny", prompt=LONG_PROMPT, max_tokens=4, cache="bypass")


def short_request() -> GenerateRequest:
    return GenerateRequest(model="tiny", prompt=SHORT_PROMPT, max_tokens=3, cache="bypass")


def chunked_backend(make_gateway: Any, deterministic: bool = True) -> Any:
    options = {"score_forward_tokens": FORWARD, "deterministic": deterministic}
    return make_gateway(models={"tiny": options}).backend("tiny")


def assert_stopped_within_one_chunk(spy: ForwardSpy) -> None:
    long_calls = spy.long_calls()
    assert long_calls and long_calls[0].tokens <= FORWARD  # the pass under way was one chunk
    after = [call for call in long_calls if call.after]
    assert len(after) <= 1, after  # at most one more pass once the caller had left
    assert all(call.tokens <= FORWARD for call in after)


@pytest.mark.parametrize("deterministic", [True, False])
def test_a_long_prefill_stops_within_one_chunk_when_its_caller_leaves(make_gateway, deterministic):
    backend = chunked_backend(make_gateway, deterministic)
    assert len(backend.lm.encode(LONG_PROMPT)) > 18 * FORWARD
    request = long_request()
    spy = ForwardSpy(backend.lm.model, watch=request.abandoned)
    spy.hold_first_until = request.abandoned  # the first chunk runs on after the caller left

    def leave() -> None:  # another thread: the caller leaves during the first chunk
        assert spy.started.wait(WAIT_S)
        request.abandoned.set()

    leaver = threading.Thread(target=leave)
    leaver.start()
    with pytest.raises(GatewayTimeoutError, match="cancelled"):
        backend.generate(request, "", timeout_s=60)
    leaver.join(WAIT_S)
    follow_up = backend.generate(short_request(), "", timeout_s=60)  # the model is free
    assert follow_up.completion_tokens > 0
    spy.remove()
    assert_stopped_within_one_chunk(spy)
    assert 1 <= backend.lm.prefill_forwards <= 2


def test_a_deadline_stops_a_long_prefill_and_the_next_caller_is_served(make_gateway):
    backend = chunked_backend(make_gateway)
    request = long_request()
    spy = ForwardSpy(backend.lm.model, watch=request.abandoned)
    spy.hold_first_until = request.abandoned  # set by the waiting caller at its deadline
    outcomes: dict[str, Any] = {}

    def other_caller() -> None:  # queued behind the long prompt while its first chunk runs
        assert spy.started.wait(WAIT_S)
        outcomes["short"] = backend.generate(short_request(), "", timeout_s=60)

    other = threading.Thread(target=other_caller)
    other.start()
    with pytest.raises(GatewayTimeoutError, match="did not answer within"):
        backend.generate(request, "", timeout_s=0.3)
    other.join(WAIT_S)
    assert not other.is_alive()
    assert outcomes["short"].completion_tokens > 0
    spy.remove()
    assert_stopped_within_one_chunk(spy)
    assert 1 <= backend.lm.prefill_forwards <= 2


def test_a_long_prefill_stops_within_one_chunk_when_the_model_closes(tiny):
    lm = LocalCausalLM(*tiny, score_forward_tokens=FORWARD)
    spy = ForwardSpy(lm.model, watch=lm.closing)

    def close_during_the_first_chunk(*_args: Any, **_kwargs: Any) -> None:
        lm.closing.set()

    hook = lm.model.register_forward_pre_hook(close_during_the_first_chunk, with_kwargs=True)
    try:
        lm.generate([GenJob(lm.encode(LONG_PROMPT), 1, 4, None)])
    finally:
        hook.remove()
        spy.remove()
    assert len(spy.calls) == 1 and spy.calls[0].tokens <= FORWARD
    assert lm.prefill_forwards == 1


def test_the_rows_of_an_abandoned_job_leave_a_batched_prefill(tiny):
    """deterministic: false prefills the rows of a batch together, in chunks of at most
    FORWARD tokens (rows x columns); an abandoned job's row leaves between chunks while the
    other job goes on to the tokens it gets alone."""
    lm = LocalCausalLM(*tiny, score_forward_tokens=FORWARD, deterministic=False)
    gone = GenJob(lm.encode(LONG_PROMPT), 1, 4, None)
    kept = GenJob(lm.encode("The key is red. " * 20), 1, 5, None)
    alone = lm.generate([kept])[0]
    spy = ForwardSpy(lm.model)
    hook = lm.model.register_forward_pre_hook(
        lambda *_: gone.abandoned.set() if len(spy.calls) == 1 else None, with_kwargs=True
    )
    try:
        together = lm.generate([gone, kept])
    finally:
        hook.remove()
        spy.remove()
    assert together[1] == alone
    assert together[0].completion_tokens == 0  # never decoded
    first, *rest = spy.calls
    assert (first.rows, first.columns) == (2, FORWARD // 2)  # the two rows' first chunk
    assert rest and all(call.rows == 1 for call in rest)  # then the kept row alone
    assert all(call.tokens <= FORWARD for call in spy.calls)


@pytest.mark.parametrize("deterministic", [True, False])
def test_a_chunked_prefill_gives_the_tokens_of_a_whole_one(tiny, deterministic):
    chunked = LocalCausalLM(*tiny, score_forward_tokens=FORWARD, deterministic=deterministic)
    whole = LocalCausalLM(*tiny, score_forward_tokens=4096, deterministic=deterministic)
    encode = chunked.encode
    jobs = [
        GenJob(encode(LONG_PROMPT), 1, 8, None),
        GenJob(encode("The key is red. " * 20), 1, 6, None),
        GenJob(encode(SHORT_PROMPT), 1, 5, None),
        GenJob(encode("Pick a colour. " * 9), 2, 6, None, temperature=0.9, seed=3),
        GenJob(encode("The door is locked. " * 30), 1, 20, None, GUIDED),
    ]
    spy = ForwardSpy(chunked.model)
    try:
        got = chunked.generate(jobs)
    finally:
        spy.remove()
    assert got == whole.generate(jobs)
    assert chunked.prefill_forwards > 0 and whole.prefill_forwards == 0
    assert max(call.tokens for call in spy.calls) <= FORWARD
    assert sum(len(g.texts[0]) for g in got) > 0
    assert got[-1].texts[0].startswith("1. ")  # the guided row kept its grammar


def test_a_prompt_that_fits_one_chunk_runs_as_before(tiny):
    lm = LocalCausalLM(*tiny, score_forward_tokens=FORWARD)
    ids = lm.encode("Pick a colour. " * 6)
    assert len(ids) <= FORWARD
    spy = ForwardSpy(lm.model)
    try:
        lm.generate([GenJob(ids, 1, 3, None)])
    finally:
        spy.remove()
    assert lm.prefill_forwards == 0  # no chunk of its own: `model.generate` prefills it
    assert spy.calls[0].tokens == len(ids)
