"""Cancellation: a score or generation whose caller is gone (it left, its RPC was cancelled or
its deadline passed) is dropped from the batcher's queue, or stops at its next scoring chunk;
X-LLMRL-Timeout is checked and capped at limits.max_timeout_s."""

from __future__ import annotations

import threading
from typing import Any

import grpc
import httpx
import pytest

from llmrl.llm_gateway.api_types import GenerateRequest, ScoreRequest
from llmrl.llm_gateway.errors import GatewayTimeoutError
from llmrl.llm_gateway.grpc_server import start_grpc_server
from llmrl.llm_gateway.rest import create_app
from llmrl.llm_gateway.service import RestServer
from llmrl.llm_gateway.v1 import llm_gateway_pb2_grpc as pb_grpc
from llmrl.llm_gateway.wire import score_to_pb

CANDIDATES = [f" choice number {i}" for i in range(8)]
SMALL_CHUNKS = {"tiny": {"score_chunk_tokens": 16}}  # two candidate rows per forward pass
WAIT_S = 30.0  # an upper bound for events that happen at once; never reached when all is well


class ModelSpy:
    """Counts the model's forward passes and the candidate rows they ran (a spy on the HF
    model); optionally holds the first pass until `release()`, `hold_until` or WAIT_S."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, backend: Any, hold: bool = False) -> None:
        self.calls, self.rows, self.prompts = 0, 0, []
        self.started, self.released = threading.Event(), threading.Event()
        self.hold_until: threading.Event | None = None
        self.jobs: list[Any] = []
        if not hold:
            self.released.set()
        real_forward, real_score = backend.lm.model.forward, backend.lm.score

        def forward(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if kwargs.get("past_key_values") is not None and kwargs.get("position_ids") is not None:
                self.rows += kwargs["input_ids"].shape[0]
            self.started.set()
            if self.hold_until is not None:
                self.hold_until.wait(WAIT_S)
            self.released.wait(WAIT_S)
            return real_forward(*args, **kwargs)

        def score(jobs: list[Any], *args: Any, **kwargs: Any) -> Any:
            self.jobs.extend(jobs)
            self.prompts.extend(tuple(job.prompt_ids) for job in jobs)
            return real_score(jobs, *args, **kwargs)

        monkeypatch.setattr(backend.lm.model, "forward", forward)
        monkeypatch.setattr(backend.lm, "score", score)

    def release(self) -> None:
        self.released.set()


def score_request(prompt: str = "Pick one:") -> ScoreRequest:
    return ScoreRequest(prompt=prompt, candidates=CANDIDATES, cache="bypass").validate(64)


def test_chunked_scoring_gives_the_same_logprobs(make_gateway):
    whole = make_gateway().backend("tiny").score(score_request(), "", 60).token_logprobs
    chunked = make_gateway(models=SMALL_CHUNKS).backend("tiny").score(score_request(), "", 60)
    for row, expected in zip(chunked.token_logprobs, whole, strict=True):
        assert row == pytest.approx(expected, abs=1e-4)


def test_a_running_score_stops_at_its_next_chunk_when_its_caller_leaves(make_gateway, monkeypatch):
    backend = make_gateway(models=SMALL_CHUNKS).backend("tiny")
    spy = ModelSpy(monkeypatch, backend)
    request = score_request()
    real_forward = backend.lm.model.forward

    def leave_during_the_first_chunk(*args: Any, **kwargs: Any) -> Any:
        if spy.calls == 1:  # the prompt pass is done: the caller leaves during chunk 1
            request.abandoned.set()
        return real_forward(*args, **kwargs)

    monkeypatch.setattr(backend.lm.model, "forward", leave_during_the_first_chunk)
    with pytest.raises(GatewayTimeoutError, match="cancelled"):
        backend.score(request, "", timeout_s=60)
    follow_up = backend.score(score_request("Next:"), "", timeout_s=60)  # the model is free
    assert len(follow_up.token_logprobs) == len(CANDIDATES)
    assert spy.rows - len(CANDIDATES) <= 2  # of the first request, only chunk 1's two rows ran


def test_a_queued_score_whose_caller_left_is_dropped(make_gateway, monkeypatch):
    backend = make_gateway().backend("tiny")
    spy = ModelSpy(monkeypatch, backend, hold=True)
    first, queued = score_request("First:"), score_request("Queued:")
    outcomes: dict[str, Any] = {}

    def call(name: str, request: ScoreRequest) -> None:
        try:
            outcomes[name] = backend.score(request, "", timeout_s=60)
        except GatewayTimeoutError as exc:
            outcomes[name] = exc

    running = threading.Thread(target=call, args=("first", first))
    running.start()
    assert spy.started.wait(WAIT_S)  # the model thread is busy with the first request
    waiting = threading.Thread(target=call, args=("queued", queued))
    waiting.start()
    while backend.batcher._queue.qsize() == 0:  # the second request waits in the queue
        threading.Event().wait(0.01)
    queued.abandoned.set()  # its caller leaves
    waiting.join(WAIT_S)
    assert not waiting.is_alive() and isinstance(outcomes["queued"], GatewayTimeoutError)
    spy.release()
    running.join(WAIT_S)
    assert len(outcomes["first"].token_logprobs) == len(CANDIDATES)
    backend.score(score_request("Last:"), "", timeout_s=60)
    queued_prompt = tuple(backend.lm.encode("Queued:"))
    assert queued_prompt not in spy.prompts  # the dropped request never reached the model
    assert backend.batcher.jobs_run == 2


def test_a_disconnected_rest_client_stops_its_score(make_gateway, monkeypatch):
    gateway = make_gateway(models=SMALL_CHUNKS)
    spy = ModelSpy(monkeypatch, gateway.backend("tiny"))
    spy.hold_until = threading.Event()
    server = RestServer(create_app(gateway)).start()
    try:
        body = {"model": "tiny", "prompt": "Pick one:", "candidates": CANDIDATES, "cache": False}
        holder = threading.Thread(
            target=lambda: (
                spy.started.wait(WAIT_S),
                spy.jobs[0].abandoned.wait(WAIT_S),  # the model waits until the gateway
                spy.hold_until.set(),  # has noticed the client left
            )
        )
        holder.start()
        with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its connection
            httpx.post(f"{server.url}/v1/score", json=body, timeout=0.5)
        holder.join(WAIT_S)
        assert spy.jobs[0].abandoned.is_set()
        body["prompt"] = "Again:"
        assert httpx.post(f"{server.url}/v1/score", json=body, timeout=60).is_success
        assert spy.rows == len(CANDIDATES)  # the first request's candidate rows never ran
    finally:
        server.stop()


def test_a_grpc_score_past_its_deadline_is_cancelled(make_gateway, monkeypatch):
    gateway = make_gateway(models=SMALL_CHUNKS)
    spy = ModelSpy(monkeypatch, gateway.backend("tiny"))
    spy.hold_until = threading.Event()
    server = start_grpc_server(gateway, "127.0.0.1", 0)
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        holder = threading.Thread(
            target=lambda: (
                spy.started.wait(WAIT_S),
                spy.jobs[0].abandoned.wait(WAIT_S),
                spy.hold_until.set(),
            )
        )
        holder.start()
        stub = pb_grpc.LlmGatewayStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.Process(score_to_pb(score_request()), timeout=0.5)
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        holder.join(WAIT_S)
        assert spy.jobs[0].abandoned.is_set()  # the server cancelled the request
        answer = stub.Process(score_to_pb(score_request("Again:")), timeout=60)
        assert len(answer.score.logprobs) == len(CANDIDATES)
        assert spy.rows == len(CANDIDATES)  # only the second request's rows ran
    finally:
        channel.close()
        server.stop(0)


def test_the_timeout_header_is_checked_and_capped(make_gateway):
    gateway = make_gateway(
        models={"tiny": {"max_context_tokens": 4096}}, limits={"max_timeout_s": 0.3}
    )
    server = RestServer(create_app(gateway)).start()
    try:
        body = {"model": "tiny", "prompt": "Count:", "max_tokens": 3000, "cache": False}
        for bad in ("soon", "-1", "0", "nan", "inf"):
            answer = httpx.post(
                f"{server.url}/v1/completions", json=body, headers={"X-LLMRL-Timeout": bad}
            )
            assert answer.status_code == 400, bad
            assert answer.json()["error"]["param"] == "X-LLMRL-Timeout"
            assert "limits.max_timeout_s" in answer.json()["error"]["message"]
        # asking for an hour gets the gateway's maximum: the long generation times out
        answer = httpx.post(
            f"{server.url}/v1/completions",
            json=body,
            headers={"X-LLMRL-Timeout": "3600"},
            timeout=120,
        )
        assert answer.status_code == 504
    finally:
        server.stop()
    # in-process callers are capped the same way
    long = GenerateRequest(model="tiny", prompt="Count:", max_tokens=3000, cache="bypass")
    long.timeout_s = 3600
    with pytest.raises(GatewayTimeoutError):
        gateway.generate(long)
