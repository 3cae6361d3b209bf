"""Issue 52, the gateway's share: a score request cannot hold the model (it stops within one
forward pass of a bounded number of tokens when its caller times out or leaves, and one whose
work is over `limits.max_score_tokens` is refused); the response cache is shared only within
a namespace (each issued key its own, `cache.share`); /health answers an issued key."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import httpx
import pytest

from llmrl.common.auth import authenticated_channel
from llmrl.llm_gateway.api_types import GenerateRequest, ScoreRequest
from llmrl.llm_gateway.cache import cache_key
from llmrl.llm_gateway.gateway import Gateway
from llmrl.llm_gateway.grpc_server import start_grpc_server
from llmrl.llm_gateway.local_causal_lm import ScoreJob
from llmrl.llm_gateway.rest import create_app
from llmrl.llm_gateway.service import RestServer
from llmrl.llm_gateway.v1 import llm_gateway_pb2_grpc as pb_grpc
from llmrl.llm_gateway.wire import generate_to_pb, score_to_pb

TOKEN = "service-t0ken"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
WAIT_S = 60.0  # a generous bound for what happens at once when all is well


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# -- finding 5: a score stops within one bounded forward pass --------------------------------
class ForwardCost:
    """Makes the tiny model's forward passes cost time in proportion to their tokens (as a real
    model's do), and records each pass's input shape."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, backend: Any, s_per_token: float) -> None:
        self.shapes: list[tuple[int, ...]] = []
        real_forward = backend.lm.model.forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            shape = tuple(kwargs["input_ids"].shape)
            self.shapes.append(shape)
            time.sleep(s_per_token * shape[0] * shape[1])
            return real_forward(*args, **kwargs)

        monkeypatch.setattr(backend.lm.model, "forward", forward)

    def tokens_of_rows(self, rows: int) -> int:
        """Tokens computed by passes of exactly `rows` rows (a score's candidate passes)."""
        return sum(r * c for r, c in self.shapes if r == rows)


LONG_CANDIDATES = [f" option {i}:" + " go to the red door and open it" * 6 for i in range(24)]
BOUNDED = {"tiny": {"score_forward_tokens": 48}}  # 24 rows x 2 columns per candidate pass


def long_score_body() -> dict[str, Any]:
    return {"model": "tiny", "prompt": "Pick one:", "candidates": LONG_CANDIDATES, "cache": False}


def full_candidate_tokens(backend: Any) -> int:
    """What the candidate passes of `long_score_body` compute when nothing stops them."""
    widest = max(len(backend.lm.encode(c)) for c in LONG_CANDIDATES)
    return len(LONG_CANDIDATES) * (widest - 1)


def one_token_completion(url: str) -> httpx.Response:
    body = {"model": "tiny", "prompt": "Hello", "max_tokens": 1, "cache": False}
    return httpx.post(f"{url}/v1/completions", json=body, timeout=WAIT_S)


def test_bounded_forward_passes_give_the_same_logprobs(make_gateway):
    """Segmented prompts and candidates, batched jobs of different lengths: the
    log-probabilities are those of one unbounded pass."""
    whole = make_gateway().backend("tiny")
    bounded = make_gateway(models={"tiny": {"score_forward_tokens": 16}}).backend("tiny")
    prompts = ["Pick one:", "Go", "You are in a kitchen. " * 8 + "What next?"]
    candidates = [[" a"], LONG_CANDIDATES[:3], [" open the door", " go north and then east"]]

    def jobs(backend: Any) -> list[ScoreJob]:
        return [
            ScoreJob(backend.lm.encode(p), [backend.lm.encode(c) for c in cs])
            for p, cs in zip(prompts, candidates, strict=True)
        ]

    expected = whole.lm.score(jobs(whole))
    before = bounded.lm.score_forwards
    got = bounded.lm.score(jobs(bounded))
    assert bounded.lm.score_forwards - before > 3  # it did run in several bounded passes
    for job_rows, job_expected in zip(got, expected, strict=True):
        for row, row_expected in zip(job_rows, job_expected, strict=True):
            assert row == pytest.approx(row_expected, abs=1e-4)
    # a lone long prompt (segmented prefill, then the prefix cache) scores the same too
    request = ScoreRequest(prompt=prompts[2], candidates=candidates[2], cache="bypass")
    for _ in range(2):
        alone = bounded.score(request.validate(64), "", 60).token_logprobs
        for row, row_expected in zip(alone, expected[2], strict=True):
            assert row == pytest.approx(row_expected, abs=1e-4)


def test_the_rows_of_an_abandoned_job_leave_a_shared_pass(make_gateway, monkeypatch):
    """Two jobs share candidate passes; when one's caller leaves mid-way its rows are dropped
    from the next pass on, and the other's scores are unchanged."""
    # the batched path, where jobs share passes (deterministic scoring keeps each job apart)
    batched = {"tiny": {**BOUNDED["tiny"], "deterministic": False}}
    lm = make_gateway(models=batched).backend("tiny").lm
    candidates = [lm.encode(c) for c in LONG_CANDIDATES[:4]]
    expected = lm.score([ScoreJob(lm.encode("Go"), candidates)])[0]
    leaving, staying = (
        ScoreJob(lm.encode("Pick:"), candidates),
        ScoreJob(lm.encode("Go"), candidates),
    )
    shapes: list[tuple[int, ...]] = []
    real_forward = lm.model.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        shapes.append(tuple(kwargs["input_ids"].shape))
        if len(shapes) == 3:  # the prompts and one candidate pass are done
            leaving.abandoned.set()
        return real_forward(*args, **kwargs)

    monkeypatch.setattr(lm.model, "forward", forward)
    left, stayed = lm.score([leaving, staying])
    for row, row_expected in zip(stayed, expected, strict=True):
        assert row == pytest.approx(row_expected, abs=1e-4)
    assert left == []  # nobody reads it: never completed
    assert shapes[2][0] == 8 and {rows for rows, _ in shapes[3:]} == {4}


@pytest.fixture
def slow_server(make_gateway: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """(backend, forward cost, REST url, gRPC stub) of a gateway whose tiny model costs 2 ms a
    token, so that `long_score_body`'s candidate passes take ~2.5 s when nothing stops them."""
    gateway = make_gateway(models=BOUNDED)
    backend = gateway.backend("tiny")
    cost = ForwardCost(monkeypatch, backend, s_per_token=0.002)
    server = RestServer(create_app(gateway)).start()
    grpc_server = start_grpc_server(gateway, "127.0.0.1", 0)
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_server.port}")
    yield backend, cost, server.url, pb_grpc.LlmGatewayStub(channel)
    channel.close()
    grpc_server.stop(0)
    server.stop()


def _time_out(url: str, _stub: Any) -> None:
    answer = httpx.post(
        f"{url}/v1/score", json=long_score_body(), headers={"X-LLMRL-Timeout": "0.5"},
        timeout=WAIT_S,
    )  # fmt: skip
    assert answer.status_code == 504, answer.text


def _disconnect(url: str, _stub: Any) -> None:
    with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its connection
        httpx.post(f"{url}/v1/score", json=long_score_body(), timeout=0.5)


def _grpc_deadline(_url: str, stub: Any) -> None:
    request = ScoreRequest(prompt="Pick one:", candidates=LONG_CANDIDATES, cache="bypass")
    with pytest.raises(grpc.RpcError) as caught:
        stub.Process(score_to_pb(request), timeout=0.5)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


@pytest.mark.parametrize("leave", [_time_out, _disconnect, _grpc_deadline])
def test_a_score_whose_caller_is_gone_stops_within_one_forward_pass(slow_server, leave):
    """One chunk of candidate rows (they fit `score_chunk_tokens`) still stops mid-way: the
    candidates run in passes of at most `score_forward_tokens`, checked between passes."""
    backend, cost, url, stub = slow_server
    leave(url, stub)
    started = time.monotonic()
    answer = one_token_completion(url)  # queued behind what is left of the score
    waited = time.monotonic() - started
    assert answer.status_code == 200, answer.text
    assert waited < WAIT_S
    computed = cost.tokens_of_rows(len(LONG_CANDIDATES))
    # ~0.5 s of 2 ms tokens (and the pass in progress) ran, not the whole ~2.5 s of them
    assert 0 < computed < full_candidate_tokens(backend) / 2
    assert max(r * c for r, c in cost.shapes if r == len(LONG_CANDIDATES)) <= 48
    settled = backend.lm.score_forwards
    time.sleep(0.3)
    assert backend.lm.score_forwards == settled  # nothing of the score runs any more


@pytest.fixture
def keyed(make_gateway: Any, provider: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """(gateway, REST url, gRPC stub) of a gateway with the service token, serving the tiny
    model and `remote-embed` (the fake provider's embeddings)."""
    base_url, _ = provider
    monkeypatch.setenv("FAKE_PROVIDER_API_KEY", "sk-test-provider")
    remote = {"backend": "openai", "base_url": base_url, "remote_model": "embed-1",
              "api_key_env": "FAKE_PROVIDER_API_KEY"}  # fmt: skip
    with _serve(make_gateway(models={"remote-embed": remote})) as served:
        yield served


@contextmanager
def _serve(gateway: Gateway) -> Iterator[Any]:
    """(gateway, REST url, gRPC stub), both requiring the service token."""
    server = RestServer(create_app(gateway, token=TOKEN)).start()
    grpc_server = start_grpc_server(gateway, "127.0.0.1", 0, token=TOKEN)
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_server.port}")
    try:
        yield gateway, server.url, pb_grpc.LlmGatewayStub(authenticated_channel(channel, TOKEN))
    finally:
        channel.close()
        grpc_server.stop(0)
        server.stop()


def issue(url: str, **body: Any) -> dict[str, Any]:
    answer = httpx.post(f"{url}/v1/keys", json={"budget_usd": 1.0, **body}, headers=ADMIN)
    assert answer.status_code == 201, answer.text
    return answer.json()


def test_a_score_over_the_compute_cap_is_refused_before_the_model(keyed):
    """64 candidates of ~300 tokens are within max_candidates and max_prompt_tokens, but not
    within limits.max_score_tokens: 413 naming the field and the limit, for a key too."""
    gateway, url, _ = keyed
    lm = gateway.backend("tiny").lm
    key = issue(url)["key"]
    big = {"prompt": "Pick one:", "candidates": [f" {i}" + " word" * 300 for i in range(64)]}
    before = lm.score_forwards
    for headers in (ADMIN, bearer(key)):
        answer = httpx.post(f"{url}/v1/score", json=big, headers=headers, timeout=WAIT_S)
        assert answer.status_code == 413, answer.text
        error = answer.json()["error"]
        assert error["param"] == "candidates"
        assert "limits.max_score_tokens" in error["message"] and "16384" in error["message"]
    assert lm.score_forwards == before  # refused before any model saw it
    small = {"prompt": "Pick one:", "candidates": [" a", " b"]}
    assert httpx.post(f"{url}/v1/score", json=small, headers=bearer(key)).status_code == 200


# -- finding 8: the cache is shared only within a namespace --------------------------------------
def _operations() -> dict[str, tuple[str, dict[str, Any]]]:
    """One deterministic (cacheable) request per cached operation: (path, body)."""
    return {
        "completion": ("/v1/completions", {"model": "tiny", "prompt": "Secret plan:",
                                           "max_tokens": 3, "temperature": 0}),
        "chat": ("/v1/chat/completions", {"model": "tiny", "max_tokens": 3, "temperature": 0,
                 "messages": [{"role": "user", "content": "my diagnosis is"}]}),
        "score": ("/v1/score", {"model": "tiny", "prompt": "Secret:", "candidates": [" a"]}),
        "embed": ("/v1/embeddings", {"model": "remote-embed", "input": ["my secret"]}),
    }  # fmt: skip


def _cached(url: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> bool:
    answer = httpx.post(f"{url}{path}", json=body, headers=headers, timeout=WAIT_S)
    assert answer.status_code == 200, answer.text
    return answer.headers["x-llmrl-cache"] == "hit"


@pytest.mark.parametrize("op", sorted(_operations()))
def test_issued_keys_never_receive_each_others_cached_answers(keyed, op):
    _, url, _ = keyed
    path, body = _operations()[op]
    alice, bob = bearer(issue(url, name="alice")["key"]), bearer(issue(url, name="bob")["key"])
    assert not _cached(url, path, body, alice)
    assert not _cached(url, path, body, bob)  # not alice's answer (cost and all)
    assert _cached(url, path, body, alice) and _cached(url, path, body, bob)  # each its own
    assert not _cached(url, path, body, ADMIN)  # the service token sees neither
    assert _cached(url, path, body, ADMIN)


def test_service_token_callers_share_one_namespace_over_rest_grpc_and_in_process(keyed):
    gateway, url, stub = keyed
    path, body = _operations()["completion"]
    assert not _cached(url, path, body, ADMIN)
    request = GenerateRequest(prompt="Secret plan:", model="tiny", max_tokens=3)
    assert stub.Process(generate_to_pb(request), timeout=WAIT_S).completion.cached
    assert gateway.generate(request).cached  # the in-process client's too
    score = ScoreRequest(prompt="Secret:", candidates=[" a"])
    assert not stub.Process(score_to_pb(score), timeout=WAIT_S).score.cached
    assert _cached(url, *_operations()["score"], ADMIN)  # gRPC's entry serves REST's caller
    key = bearer(issue(url)["key"])
    assert not _cached(url, path, body, key)  # the shared namespace is not a key's


def test_cache_share_global_shares_answers_across_keys(make_gateway):
    with _serve(make_gateway(cache={"share": "global"})) as (_, url, _):
        path, body = _operations()["completion"]
        assert not _cached(url, path, body, bearer(issue(url)["key"]))
        assert _cached(url, path, body, bearer(issue(url)["key"]))
        assert _cached(url, path, body, ADMIN)
    with pytest.raises(ValueError, match=r"cache\.share"):
        make_gateway(cache={"share": "per_tenant"})


def test_the_namespace_is_part_of_the_cache_key():
    params = {"prompt": "hi", "max_tokens": 3}
    shared = cache_key("completion", "hf", "hf:m", "", **params)
    assert cache_key("completion", "hf", "hf:m", "", namespace="", **params) == shared
    alice = cache_key("completion", "hf", "hf:m", "", namespace="key:a", **params)
    bob = cache_key("completion", "hf", "hf:m", "", namespace="key:b", **params)
    assert len({shared, alice, bob}) == 3


# -- finding 9: /health answers an issued key ----------------------------------------------------
def test_health_answers_a_valid_gateway_key(keyed):
    _, url, _ = keyed
    key = issue(url)["key"]
    answer = httpx.get(f"{url}/health", headers=bearer(key))
    assert answer.status_code == 200 and answer.json()["status"] == "ok"
    assert httpx.get(f"{url}/health").status_code == 200  # open to everyone, as before
    assert httpx.get(f"{url}/metrics", headers=bearer(key)).status_code == 403  # still scoped


# -- finding 5 with the real model: a cancelled score frees SmolLM2 within seconds -----------
REAL_FORWARD_TOKENS = 128  # short passes even on a busy 2-core CPU


@pytest.fixture(scope="module")
def smollm2_server(smollm2_path: Any) -> Iterator[tuple[Any, str]]:
    """SmolLM2 behind the REST API, on one torch thread (on a busy shared CPU two threads'
    busy-waiting makes each pass several times slower), warmed up; torch's thread count is
    restored afterwards."""
    import torch

    threads = torch.get_num_threads()
    gateway = Gateway(
        {
            "torch_threads": 1,
            "models": {"smollm2": {"score_forward_tokens": REAL_FORWARD_TOKENS}},
            "cache": {"backend": "none"},
            "ledger": {"backend": "memory"},
        }
    )
    try:
        backend = gateway.backend("smollm2")
        gateway.score(ScoreRequest(prompt="Warm:", candidates=[" up", " down"]))
        gateway.generate(GenerateRequest(prompt="Warm", max_tokens=1))
        server = RestServer(create_app(gateway)).start()
        yield backend, server.url
        server.stop()
    finally:
        gateway.close()
        torch.set_num_threads(threads)


def test_real_model_a_cancelled_long_score_frees_the_model_within_seconds(smollm2_server):
    """48 candidates of ~300 tokens (within every limit): unbounded, one forward pass of 14,000
    tokens holds SmolLM2 for minutes on a small CPU. Timed out (X-LLMRL-Timeout) or abandoned
    by its client, it stops after the pass in progress: a fresh one-token completion is
    answered within seconds, and the score's passes stop."""
    backend, url = smollm2_server
    candidates = [f" {i}." + " the robot goes to the red door" * 40 for i in range(48)]
    body = {"prompt": "Story:", "candidates": candidates, "cache": False}
    widest = max(len(backend.lm.encode(c)) for c in candidates)
    rows = len(candidates)
    step = max(1, REAL_FORWARD_TOKENS // rows)
    full_passes = -(-(widest - 1) // step)  # ceil: what the unstopped score would run

    def time_out() -> None:
        answer = httpx.post(
            f"{url}/v1/score", json=body, headers={"X-LLMRL-Timeout": "1.5"}, timeout=WAIT_S
        )
        assert answer.status_code == 504, answer.text

    def disconnect() -> None:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/v1/score", json=body, timeout=1.5)

    for leave in (time_out, disconnect):
        before = backend.lm.score_forwards
        leave()
        started = time.monotonic()
        completion = {"prompt": "Hello", "max_tokens": 1, "cache": False}
        answer = httpx.post(f"{url}/v1/completions", json=completion, timeout=WAIT_S)
        freed_s = time.monotonic() - started
        assert answer.status_code == 200, answer.text
        ran = backend.lm.score_forwards - before
        print(f"{leave.__name__}: model free {freed_s:.2f} s after the caller left; "
              f"{ran} of {full_passes + 1} scoring passes ran")  # fmt: skip
        assert freed_s < 30.0  # generous: one pass of 128 tokens is ~0.2 s on 2 idle cores
        assert ran < full_passes / 2
        threading.Event().wait(0.5)
        assert backend.lm.score_forwards - before == ran  # the score stays stopped
