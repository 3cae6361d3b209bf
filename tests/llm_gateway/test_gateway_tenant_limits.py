"""One tenant (a gateway-issued key) cannot starve another, against the real REST app over the
tiny model: a key over its requests in flight gets a 429 with Retry-After (before its body is
read) while another key is served; a key over its tokens per minute (local, unpriced compute
included) gets a 429 naming that limit and is served again once the window has slid; an
oversized /v1/count_tokens body is a 413 before it is read, a long input a 413 before it is
tokenized; the service token's callers are not held to any key's limits (their own,
`limits.service_*`, are RESOURCE_EXHAUSTED over gRPC); at a local model, waiting requests are
let in tenant by tenant. No assertion on how long anything took."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import grpc
import httpx
import pytest

from llmrl.llm_gateway.admission import FairGate
from llmrl.llm_gateway.client import connect
from llmrl.llm_gateway.errors import GatewayTimeoutError, RateLimitedError
from llmrl.llm_gateway.grpc_server import start_grpc_server
from llmrl.llm_gateway.rest import create_app
from llmrl.llm_gateway.service import RestServer
from llmrl.llm_gateway.v1 import llm_gateway_pb2 as pb
from llmrl.llm_gateway.v1 import llm_gateway_pb2_grpc as pb_grpc

TOKEN = "service-t0ken"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
NO_CACHE = {"X-LLMRL-Cache": "bypass"}


@pytest.fixture
def serve(make_gateway: Any) -> Iterator[Any]:
    """serve(**settings) → (gateway, url): the REST app with the service token, over "tiny"."""
    servers: list[RestServer] = []

    def start(**settings: Any) -> tuple[Any, str]:
        gateway = make_gateway(**settings)
        servers.append(RestServer(create_app(gateway, token=TOKEN)).start())
        return gateway, servers[-1].url

    yield start
    for server in servers:
        server.stop()


def issue(url: str, **body: Any) -> dict[str, Any]:
    answer = httpx.post(f"{url}/v1/keys", json={"budget_usd": 1.0, **body}, headers=ADMIN)
    assert answer.status_code == 201, answer.text
    return answer.json()


def bearer(key: dict[str, Any] | str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key if isinstance(key, str) else key['key']}", **NO_CACHE}


def chat(url: str, headers: dict[str, str], text: str = "hi", **extra: Any) -> httpx.Response:
    body = {**CHAT, "messages": [{"role": "user", "content": text}], **extra}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60)


class HeldModel:
    """Wraps the tiny backend's generate: a request of a tenant in `held` waits until the
    test lets it go (`release`), so that it stays in flight for as long as the test needs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, backend: Any, held: set[str]) -> None:
        self.held, self.entered = held, []
        self.gate = threading.Semaphore(0)
        self.lock = threading.Lock()
        real = backend.generate

        def generate(request: Any, *args: Any) -> Any:
            with self.lock:
                self.entered.append(request.tenant)
            if request.tenant in self.held:
                assert self.gate.acquire(timeout=60), "the test never let the request go"
            return real(request, *args)

        monkeypatch.setattr(backend, "generate", generate)

    def wait_for(self, count: int) -> None:
        for _ in range(3000):
            with self.lock:
                if len(self.entered) >= count:
                    return
            time.sleep(0.01)
        raise AssertionError(f"only {len(self.entered)} requests reached the model")

    def release(self, count: int = 1) -> None:
        for _ in range(count):
            self.gate.release()


def metric(url: str, reason: str, caller: str) -> float:
    text = httpx.get(f"{url}/metrics", headers=ADMIN).text
    line = f'llmrl_gateway_rejected_requests_total{{caller="{caller}",reason="{reason}"}} '
    values = [float(row.removeprefix(line)) for row in text.splitlines() if row.startswith(line)]
    return values[0] if values else 0.0


def raw_request(url: str, path: str, headers: dict[str, str], declared: int) -> tuple[int, dict]:
    """POST `path` declaring a body of `declared` bytes but sending none of it: only an
    answer given before the body is read comes back (else the socket times out)."""
    host, port = url.removeprefix("http://").split(":")
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json",
             f"Content-Length: {declared}", *(f"{k}: {v}" for k, v in headers.items())]  # fmt: skip
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        received = b""
        while b"\r\n\r\n" not in received or not received.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_a_key_over_its_requests_in_flight_gets_429_while_another_key_is_served(serve, monkeypatch):
    gateway, url = serve()
    greedy = issue(url, max_concurrent=2, name="greedy")
    other = issue(url)  # the gateway's default: half of tiny's batch of 8
    assert greedy["max_concurrent"] == 2 and other["max_concurrent"] is None
    held = HeldModel(monkeypatch, gateway.backend("tiny"), {f"key:{greedy['id']}"})
    with ThreadPoolExecutor(4) as pool:
        first = [pool.submit(chat, url, bearer(greedy), f"held {i}") for i in range(2)]
        held.wait_for(2)  # both of the key's requests are at the model, held there
        refused = chat(url, bearer(greedy), "one more")
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.headers.get("x-should-retry") != "false"  # clients may retry it
        error = refused.json()["error"]
        assert error["type"] == "rate_limit_exceeded" and error["param"] == "max_concurrent"
        assert (
            "2 requests in flight" in error["message"] and "max_concurrent = 2" in error["message"]
        )
        # refused before its body is read: a body that never comes is not waited for
        status, body = raw_request(url, "/v1/chat/completions", bearer(greedy), 3 << 20)
        assert status == 429 and body["error"]["param"] == "max_concurrent"
        # another key (and the service token) is let in meanwhile: at the model (tiny is
        # deterministic: while tenants share it, it holds one request at a time) after the
        # key's two, and served
        others = [pool.submit(chat, url, bearer(other), "me too"),
                  pool.submit(chat, url, {**ADMIN, **NO_CACHE}, "and me")]  # fmt: skip
        gate = gateway.admission.gate("tiny", gateway.backend("tiny"))
        wait_until(lambda: len(gate._waiting) == 2)
        held.held.clear()  # what comes next goes straight through
        held.release(2)
        assert [f.result().status_code for f in first + others] == [200] * 4
    assert chat(url, bearer(greedy), "my turn again").status_code == 200
    assert metric(url, "concurrency", "key") == 2
    assert gateway.usage(f"key:{greedy['id']}")["errors"] == 2  # counted in its ledger run
    text = httpx.get(f"{url}/metrics", headers=ADMIN).text
    assert greedy["id"] not in text and greedy["key"] not in text
    (row,) = [r for r in httpx.get(f"{url}/v1/keys", headers=ADMIN).json()["data"]
              if r["id"] == other["id"]]  # fmt: skip
    assert row["limits"]["max_concurrent"] == 4  # in force: the default


def test_the_default_concurrency_is_the_gateways_setting(serve, monkeypatch):
    gateway, url = serve(limits={"key_max_concurrent": 1})
    key = issue(url)
    held = HeldModel(monkeypatch, gateway.backend("tiny"), {f"key:{key['id']}"})
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(chat, url, bearer(key), "held")
        held.wait_for(1)
        refused = chat(url, bearer(key), "second")
        assert refused.status_code == 429
        error = refused.json()["error"]
        assert error["param"] == "limits.key_max_concurrent"
        assert "limits.key_max_concurrent = 1" in error["message"]
        held.release()
        assert first.result().status_code == 200


def test_tokens_per_minute_spent_is_429_naming_it_then_served_after_the_window(serve):
    # tiny is local and unpriced: its tokens count all the same. 60 per minute over a 1 s
    # window: 1 token per window, so one answer spends it
    _, url = serve(limits={"rate_window_s": 1.0, "key_tokens_per_minute": 60})
    spender, other = issue(url), issue(url)
    first = chat(url, bearer(spender), "spend")
    assert first.status_code == 200 and first.json()["llmrl"]["cost_usd"] == 0
    refused = chat(url, bearer(spender), "again")
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert (
        error["type"] == "rate_limit_exceeded" and error["param"] == "limits.key_tokens_per_minute"
    )
    assert "60 tokens per minute" in error["message"] and "rate_window_s" in error["message"]
    retry_after = int(refused.headers["retry-after"])
    assert retry_after >= 1
    assert chat(url, bearer(other), "unaffected").status_code == 200  # its own window
    assert chat(url, {**ADMIN, **NO_CACHE}, "service").status_code == 200
    assert metric(url, "tokens_per_minute", "key") == 1
    time.sleep(retry_after)  # what the answer said to wait
    assert chat(url, bearer(spender), "after the window").status_code == 200
    # a key's own limit wins over the gateway's
    roomy = issue(url, tokens_per_minute=600_000)
    for i in range(3):
        assert chat(url, bearer(roomy), f"roomy {i}").status_code == 200


def test_a_cache_hit_costs_no_tokens(serve):
    _, url = serve(limits={"key_tokens_per_minute": 300})
    key = issue(url)
    cached = {"Authorization": f"Bearer {key['key']}"}  # cache auto: greedy answers are kept
    first = chat(url, cached, "the same")
    assert first.status_code == 200 and first.headers["x-llmrl-cache"] == "miss"
    assert 40 * first.json()["usage"]["total_tokens"] > 300  # 40 misses would pass the limit
    for _ in range(40):
        hit = chat(url, cached, "the same")
        assert hit.status_code == 200 and hit.headers["x-llmrl-cache"] == "hit"


def test_an_oversized_count_tokens_body_is_413_before_it_is_read(serve, monkeypatch):
    gateway, url = serve()
    counted = []
    real = gateway.count_tokens
    monkeypatch.setattr(gateway, "count_tokens", lambda *a: counted.append(1) or real(*a))
    limit = gateway.settings.limits.route_max_body_bytes["/v1/count_tokens"]
    assert limit == 1 << 20 < gateway.settings.limits.max_body_bytes
    key = issue(url)
    setting = "limits.route_max_body_bytes['/v1/count_tokens']"
    prefix, suffix = b'{"input": "', b'"}'
    just_over = prefix + b"x" * (limit + 1 - len(prefix) - len(suffix)) + suffix
    for headers in (bearer(key), ADMIN):
        refused = httpx.post(f"{url}/v1/count_tokens", content=just_over, headers=headers)
        assert refused.status_code == 413, refused.text
        assert setting in refused.json()["error"]["message"] and str(limit) in refused.text
        # declared too large: refused without reading a byte of it
        status, body = raw_request(url, "/v1/count_tokens", headers, 3 << 20)
        assert status == 413 and setting in body["error"]["message"]
        # chunked (no declared length): read up to the limit, then refused
        chunks = iter([just_over[: limit // 2], just_over[limit // 2 :]])
        refused = httpx.post(f"{url}/v1/count_tokens", content=chunks, headers=headers)
        assert refused.status_code == 413 and setting in refused.json()["error"]["message"]
    assert counted == []  # nothing was parsed nor counted
    assert metric(url, "body_size", "key") == 3 and metric(url, "body_size", "service") == 3
    # within the body limit, a text over limits.max_prompt_chars is refused before tokenizing
    tokenized = []
    backend = gateway.backend("tiny")
    real_count = backend.count_tokens
    monkeypatch.setattr(backend, "count_tokens", lambda t: tokenized.append(1) or real_count(t))
    just_under = prefix + b"x" * (limit - len(prefix) - len(suffix)) + suffix
    refused = httpx.post(f"{url}/v1/count_tokens", content=just_under, headers=bearer(key))
    assert refused.status_code == 413 and "limits.max_prompt_chars" in refused.text
    assert tokenized == []
    answer = httpx.post(f"{url}/v1/count_tokens", json={"input": "hello world"}, headers=ADMIN)
    assert answer.json() == {"tokens": 2} and tokenized == [1]


def test_a_long_prompt_is_refused_before_it_is_tokenized(serve, monkeypatch):
    gateway, url = serve(limits={"max_prompt_chars": 1000})
    backend = gateway.backend("tiny")
    tokenized = []
    real = backend.prompt_tokens
    monkeypatch.setattr(backend, "prompt_tokens", lambda r: tokenized.append(1) or real(r))
    refused = chat(url, {**ADMIN, **NO_CACHE}, "x" * 1001)
    assert refused.status_code == 413 and refused.json()["error"]["param"] == "messages"
    assert "limits.max_prompt_chars" in refused.json()["error"]["message"]
    score = {"prompt": "p" * 600, "candidates": ["c" * 300, "d" * 300]}
    refused = httpx.post(f"{url}/v1/score", json=score, headers=ADMIN)
    assert refused.status_code == 413 and refused.json()["error"]["param"] == "candidates"
    assert tokenized == []


def test_the_service_token_is_held_to_no_keys_limits(serve, monkeypatch):
    _, url = serve(limits={"key_max_concurrent": 1, "key_tokens_per_minute": 1})
    service = {**ADMIN, **NO_CACHE}
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda i: chat(url, service, f"service {i}"), range(6)))
    assert [a.status_code for a in answers] == [200] * 6
    for i in range(3):  # far over a key's token limit
        assert chat(url, service, f"more {i}").status_code == 200
    assert metric(url, "concurrency", "service") == 0
    assert metric(url, "tokens_per_minute", "service") == 0


def test_the_service_tokens_own_limits_over_grpc_are_resource_exhausted(make_gateway):
    gateway = make_gateway(limits={"service_tokens_per_minute": 1})  # one answer spends it
    server = start_grpc_server(gateway, "127.0.0.1", 0)
    address = f"127.0.0.1:{server.port}"
    remote = connect(address)
    try:
        remote.chat("spend the minute", max_tokens=2, cache=False)
        with pytest.raises(RateLimitedError) as refused:
            remote.chat("once more", max_tokens=2, cache=False)
        assert "limits.service_tokens_per_minute" in str(refused.value)
        assert refused.value.field == "limits.service_tokens_per_minute"
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.LlmGatewayStub(channel)
            request = pb.GatewayRequest(count_tokens=pb.CountTokensRequest(text="hello"))
            with pytest.raises(grpc.RpcError) as raw:
                stub.Process(request)
            assert raw.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            same = raw.value.details().split("; retry after")[0]
            assert same == str(refused.value).split("; retry after")[0]
            trailing = dict(raw.value.trailing_metadata())
            assert int(trailing["retry-after"]) >= 1
            assert trailing["llmrl-error-kind"] == "rate_limit_exceeded"
        assert remote.models()  # not a model operation: not limited
    finally:
        remote.close()
        server.stop(0)


@pytest.mark.parametrize("deterministic", [True, False])
def test_a_tenant_with_many_waiting_does_not_hold_back_another(serve, monkeypatch, deterministic):
    """The service token's callers, alone at tiny, fill its fair gate (its batch of 8 at the
    model, 4 more waiting). Then a key's request comes: the model is shared from then on, so
    it holds 1 request at a time when deterministic (rows run one by one), else its batch,
    and the key's request goes in at the first place that frees, ahead of all 4."""
    gateway, url = serve(models={"tiny": {"deterministic": deterministic}})
    gate = gateway.admission.gate("tiny", gateway.backend("tiny"))
    assert gate is not None and (gate.depth, gate.shared_depth) == (8, 1 if deterministic else 8)
    key = issue(url)
    held = HeldModel(monkeypatch, gateway.backend("tiny"), {""})
    service = {**ADMIN, **NO_CACHE}
    with ThreadPoolExecutor(13) as pool:
        flood = [pool.submit(chat, url, service, f"flood {i}") for i in range(12)]
        held.wait_for(8)
        wait_until(lambda: len(gate._waiting) == 4)
        assert not gate.shared  # one tenant alone: its whole batch
        mine = pool.submit(chat, url, bearer(key), "just one")
        wait_until(lambda: len(gate._waiting) == 5)
        assert gate.shared == deterministic
        held.release(8 if deterministic else 1)  # places free: the key's request takes one
        assert mine.result().status_code == 200
        assert held.entered[8] == f"key:{key['id']}"  # before any of the 4 waiting before it
        held.release(12)
        assert all(f.result().status_code == 200 for f in flood)


def test_a_shared_gate_holds_its_shared_depth():
    gate = FairGate(4, 1)
    entered = threading.Event()
    with ExitStack() as alone:
        for _ in range(4):  # one tenant alone: up to the whole depth
            alone.enter_context(gate.slot("a", 1, None, "m"))
        assert not gate.shared

        def other() -> None:
            with gate.slot("b", 30, None, "m"):
                entered.set()

        thread = threading.Thread(target=other)
        thread.start()
        wait_until(lambda: gate.shared)
    thread.join(30)  # b went in once the model held fewer than 1
    assert entered.is_set()


def wait_until(condition: Any) -> None:
    for _ in range(3000):
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError("the condition never held")


def test_the_fair_gate_lets_tenants_in_by_fewest_at_the_model():
    gate = FairGate(2)
    tenants = ["a", "a", "a", "a", "b", "a", "c"]
    order: list[int] = []  # which requests were let in, in turn
    done = [threading.Event() for _ in tenants]

    def request(index: int) -> None:
        with gate.slot(tenants[index], 30, None, "m"):
            order.append(index)
            done[index].wait(30)

    threads = [threading.Thread(target=request, args=(i,)) for i in range(len(tenants))]
    for i, thread in enumerate(threads):
        thread.start()
        wait_until(lambda i=i: len(order) == i + 1 if i < 2 else len(gate._waiting) == i - 1)
    # 0 and 1 (a, a) at the model; 2, 3, 5 (a), 4 (b) and 6 (c) waiting. Each time a place
    # frees, the tenant with the fewest at the model goes first: b, then c, before any a
    for leaving, entering in ((1, 4), (4, 6), (6, 2), (2, 3), (3, 5)):
        done[leaving].set()
        wait_until(lambda entering=entering: order[-1] == entering)
    for event in done:
        event.set()
    for thread in threads:
        thread.join(30)
    assert order == [0, 1, 4, 6, 2, 3, 5]


def test_a_request_waiting_at_the_gate_times_out_or_leaves():
    gate = FairGate(1)
    with gate.slot("a", 30, None, "m"):
        with pytest.raises(GatewayTimeoutError, match=r"timeout of 0\.05 s"):
            gate.slot("b", 0.05, None, "m").__enter__()
        left = threading.Event()
        left.set()
        with pytest.raises(GatewayTimeoutError, match="its caller left"):
            gate.slot("b", 30, left, "m").__enter__()
        assert gate._waiting == []
    with gate.slot("b", 1, None, "m"):  # the place was given back
        pass


def test_key_limits_are_checked_when_issued(serve):
    _, url = serve()
    for body, field in (
        ({"max_concurrent": 0}, "max_concurrent"),
        ({"max_concurrent": 2000}, "max_concurrent"),
        ({"max_concurrent": "4"}, "max_concurrent"),
        ({"tokens_per_minute": 0}, "tokens_per_minute"),
        ({"tokens_per_minute": 1.5}, "tokens_per_minute"),
    ):
        answer = httpx.post(f"{url}/v1/keys", json={"budget_usd": 1, **body}, headers=ADMIN)
        assert answer.status_code in (400, 422), (body, answer.text)
        assert answer.json()["error"]["param"] == field
    issued = issue(url, max_concurrent=3, tokens_per_minute=5000)
    rows = httpx.get(f"{url}/v1/keys", headers=ADMIN).json()["data"]
    (row,) = [r for r in rows if r["id"] == issued["id"]]
    assert row["max_concurrent"] == 3 and row["limits"]["tokens_per_minute"] == 5000
