"""The `openai` backend's lean client for engines on plain http (`upstream_http`), sync and
on an event loop, and the gateway's REST routes serving a remote model on the loop itself
(`Gateway.generates_async`): the same cache, ledger, retries, fallbacks, timeouts and errors
as in a worker thread."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading

import httpx
import pytest
from support.fake_provider import Behaviour

from llmrl.llm_gateway.api_types import GenerateRequest
from llmrl.llm_gateway.backends.upstream_http import (
    AsyncJsonHttpClient,
    JsonHttpClient,
    UpstreamStatus,
    UpstreamTimeout,
    UpstreamUnreachable,
    lean_transport,
)
from llmrl.llm_gateway.rest import create_app
from llmrl.llm_gateway.service import RestServer

SECRET = "sk-test-0123456789abcdefSECRET"
CHAT = {"model": "m", "messages": [{"role": "user", "content": "ping"}]}


def test_only_plain_http_without_a_proxy_takes_the_lean_client(monkeypatch):
    for variable in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(variable, raising=False)
    assert lean_transport("http://127.0.0.1:8000/v1")
    assert not lean_transport("https://api.openai.com/v1") and not lean_transport(None)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    assert not lean_transport("http://engine:8000/v1")
    monkeypatch.setenv("NO_PROXY", "engine")
    assert lean_transport("http://engine:8000/v1")


def test_the_sync_and_async_clients_answer_alike_and_keep_their_connections(provider):
    base_url, state = provider
    sync = JsonHttpClient(base_url, SECRET)
    answers = [sync.post("/chat/completions", CHAT, 5) for _ in range(3)]
    assert len(sync._idle) == 1  # one connection, kept

    async def on_a_loop() -> list:
        client = AsyncJsonHttpClient(base_url, SECRET)
        got = [await client.post("/chat/completions", CHAT, 5) for _ in range(3)]
        assert len(client._idle) == 1
        client.close()
        return got

    assert asyncio.run(on_a_loop()) == answers
    assert answers[0]["choices"][0]["message"]["content"] == "echo: ping"
    assert state.requests_for("m")[-1].authorization == f"Bearer {SECRET}"
    sync.close()


def test_errors_timeouts_and_an_engine_that_is_not_there(provider):
    base_url, state = provider
    state.behaviours["bad"] = Behaviour(always_fail=True, status=503, retry_after="2")
    state.behaviours["slow"] = Behaviour(delay_s=1.0)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"

    def check(post) -> None:
        with pytest.raises(UpstreamStatus) as failed:
            post(base_url, {**CHAT, "model": "bad"}, 5)
        assert failed.value.status == 503 and failed.value.headers["retry-after"] == "2"
        assert failed.value.message == "Error code: 503 - try later"  # as the openai client
        with pytest.raises(UpstreamTimeout):
            post(base_url, {**CHAT, "model": "slow"}, 0.2)
        with pytest.raises(UpstreamUnreachable):
            post(nobody, CHAT, 5)

    check(lambda url, body, t: JsonHttpClient(url, None).post("/chat/completions", body, t))

    async def on_a_loop() -> None:
        async def post(url, body, t):
            return await AsyncJsonHttpClient(url, None).post("/chat/completions", body, t)

        for case in ("bad", "slow", "nobody"):
            body = {**CHAT, "model": case}
            url = nobody if case == "nobody" else base_url
            error = {"bad": UpstreamStatus, "slow": UpstreamTimeout, "nobody": UpstreamUnreachable}
            with pytest.raises(error[case]):
                await post(url, body, 0.2 if case == "slow" else 5)

    asyncio.run(on_a_loop())


def _closing_server(chunked: bool) -> tuple[str, list[int]]:
    """A raw HTTP/1.1 server answering every request on a connection, then closing the
    connection once idle (as a keep-alive timeout does); chunked or with a length."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    connections: list[int] = []

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(0.3)
            try:
                while True:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        data += conn.recv(65536)
                    head, _, body = data.partition(b"\r\n\r\n")
                    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                    while len(body) < length:
                        body += conn.recv(65536)
                    answer = json.dumps({"choices": [{"index": 0, "text": "hi"}]}).encode()
                    if chunked:
                        half = len(answer) // 2
                        parts = (answer[:half], answer[half:])
                        payload = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts)
                        payload += b"0\r\n\r\n"
                        framing = b"Transfer-Encoding: chunked"
                    else:
                        payload, framing = answer, b"Content-Length: %d" % len(answer)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 + framing + b"\r\n\r\n" + payload)  # fmt: skip
            except (TimeoutError, OSError, IndexError):
                return  # idle: close, as a keep-alive timeout does

    def accept() -> None:
        while True:
            conn, _ = listener.accept()
            connections.append(1)
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}/v1", connections


@pytest.mark.parametrize("chunked", [False, True])
def test_a_connection_the_server_closed_while_idle_is_not_an_error(chunked):
    import time

    url, connections = _closing_server(chunked)
    sync = JsonHttpClient(url, None)
    assert sync.post("/completions", {"prompt": "a"}, 5)["choices"][0]["text"] == "hi"
    time.sleep(0.6)  # the server closed the idle connection
    assert sync.post("/completions", {"prompt": "a"}, 5)["choices"][0]["text"] == "hi"
    assert len(connections) == 2

    async def on_a_loop() -> None:
        client = AsyncJsonHttpClient(url, None)
        for _ in range(2):
            assert (await client.post("/completions", {"prompt": "a"}, 5))["choices"][0][
                "text"
            ] == "hi"
        await asyncio.sleep(0.6)
        assert (await client.post("/completions", {"prompt": "a"}, 5))["choices"][0]["text"] == "hi"

    asyncio.run(on_a_loop())
    assert len(connections) == 4  # one more for the loop's, one after its idle close


@pytest.fixture
def loop_gateway(make_gateway, provider, redis_url, monkeypatch):
    """A service-mode gateway (Redis cache and ledger) serving remote models over REST."""
    base_url, state = provider
    monkeypatch.setenv("FAKE_PROVIDER_API_KEY", SECRET)

    def remote(model_id: str, **extra):
        return {"backend": "openai", "base_url": base_url, "remote_model": model_id,
                "api_key_env": "FAKE_PROVIDER_API_KEY", "backoff_s": 0.01,
                "max_backoff_s": 0.05, "prompt_usd_per_1m": 1.0, **extra}  # fmt: skip

    models = {
        "remote": remote("loop-1"),
        "flaky": remote("loop-flaky"),
        "broken": remote("loop-broken", fallback="remote", max_retries=1),
        "slow": remote("loop-slow", max_retries=0),
        "leaky": remote("loop-leaky"),
    }
    state.behaviours.update({"loop-broken": Behaviour(always_fail=True, status=503),
                             "loop-slow": Behaviour(delay_s=1.0),
                             "loop-leaky": Behaviour(leak_key=True)})  # fmt: skip
    gateway = make_gateway(
        mode="service", models=models,
        cache={"backend": "redis", "redis_url": redis_url, "prefix": "loop-test:cache:"},
        ledger={"backend": "memory"},
    )  # fmt: skip
    server = RestServer(create_app(gateway)).start()
    yield gateway, server.url, state
    server.stop()


def test_rest_serves_a_remote_model_on_the_event_loop_with_cache_ledger_and_errors(loop_gateway):
    gateway, url, state = loop_gateway
    client = httpx.Client(base_url=url, timeout=30, headers={"X-LLMRL-Run": "loop-run"})

    def chat(model: str, text: str, **headers: str) -> httpx.Response:
        body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 5}
        return client.post("/v1/chat/completions", json=body, headers=headers)

    first = chat("remote", "hello")  # loads the model (in a worker thread)
    assert first.status_code == 200, first.text
    request = GenerateRequest(messages=[{"role": "user", "content": "x"}], model="remote")
    assert gateway.generates_async(request)  # from now on: on the loop
    miss, hit = chat("remote", "on the loop"), chat("remote", "on the loop")
    assert miss.headers["x-llmrl-cache"] == "miss" and hit.headers["x-llmrl-cache"] == "hit"
    assert miss.json()["choices"][0]["message"]["content"] == "echo: on the loop"
    assert hit.json()["choices"] == miss.json()["choices"] and miss.json()["llmrl"]["cost_usd"] > 0

    chat("flaky", "warm")  # loaded
    state.behaviours["loop-flaky"] = Behaviour(fail_next=2, status=429, retry_after="0.2")
    retried = chat("flaky", "retried", **{"X-LLMRL-Cache": "bypass"})
    assert retried.status_code == 200 and len(state.requests_for("loop-flaky")) == 4
    times = [r.at for r in state.requests_for("loop-flaky")[1:]]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert min(gaps) >= 0.2  # Retry-After honoured on the loop too

    chat("broken", "warm")
    fell_back = chat("broken", "fall back")
    assert fell_back.status_code == 200 and fell_back.json()["model"] == "remote"

    chat("slow", "warm", **{"X-LLMRL-Timeout": "5"})
    timed_out = chat("slow", "too slow", **{"X-LLMRL-Timeout": "0.3"})
    assert timed_out.status_code == 504, timed_out.text

    chat("leaky", "warm")
    leaked = chat("leaky", "leak")
    assert leaked.status_code == 502 and SECRET not in leaked.text

    usage = gateway.usage("loop-run")
    assert usage["cache_hits"] == 1 and usage["errors"] >= 2
    assert usage["budget"]["usd_remaining"] is None and gateway.ledger.remaining("loop-run") == (
        None, None,
    )  # fmt: skip
    gateway.set_budget("budgeted", usd=0.0)
    spent = chat("remote", "no money", **{"X-LLMRL-Run": "budgeted"})
    assert spent.status_code == 429 and spent.headers.get("x-should-retry") == "false"
