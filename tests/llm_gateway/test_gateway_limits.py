"""Bounded work and bad input at the gateway's REST API (issue 14): an oversized score, chat or
embedding request is refused with 413 naming the limit before the model is called (counted
on the backend, never timed); a body over `limits.max_body_bytes` is a 413; a lone surrogate in
any JSON string is a 400 naming the field; a budget of the wrong type is a 422."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from llmrl.llm_gateway.rest import create_app
from llmrl.llm_gateway.service import RestServer

LIMITS = {"max_prompt_tokens": 64, "max_embed_chars": 100, "max_body_bytes": 4096}


class CallCounter:
    """Counts calls to one method of a real backend and passes them through (a spy)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, backend: Any, method: str) -> None:
        self.calls = 0
        real = getattr(backend, method)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(backend, method, counted)


@pytest.fixture
def limited(make_gateway: Any) -> Iterator[tuple[Any, str]]:
    gateway = make_gateway(limits=LIMITS)
    server = RestServer(create_app(gateway)).start()
    yield gateway, server.url
    server.stop()


def test_an_oversized_score_request_never_reaches_the_model(limited, monkeypatch):
    gateway, url = limited
    scored = CallCounter(monkeypatch, gateway.backend("tiny"), "score")
    small = {"model": "tiny", "prompt": "Pick one:", "candidates": ["a", "b"]}
    assert httpx.post(f"{url}/v1/score", json=small).status_code == 200
    assert scored.calls == 1
    big = {**small, "candidates": ["word " * 20] * 8}  # ~160 candidate tokens over 64
    refused = httpx.post(f"{url}/v1/score", json=big)
    assert refused.status_code == 413, refused.text
    error = refused.json()["error"]
    assert error["param"] == "candidates" and "limits.max_prompt_tokens" in error["message"]
    assert "64" in error["message"]
    assert scored.calls == 1  # refused before the model


def test_an_oversized_chat_request_never_reaches_the_model(limited, monkeypatch):
    gateway, url = limited
    generated = CallCounter(monkeypatch, gateway.backend("tiny"), "generate")
    body = {
        "model": "tiny",
        "max_tokens": 2,
        "messages": [{"role": "user", "content": "hi " * 200}],
    }
    refused = httpx.post(f"{url}/v1/chat/completions", json=body)
    assert refused.status_code == 413 and refused.json()["error"]["param"] == "messages"
    assert generated.calls == 0


def test_an_oversized_embedding_input_is_refused_naming_the_limit(limited):
    _, url = limited
    refused = httpx.post(f"{url}/v1/embeddings", json={"model": "minilm", "input": ["x" * 101]})
    assert refused.status_code == 413
    assert "limits.max_embed_chars" in refused.json()["error"]["message"]


def test_a_body_over_the_limit_is_413_naming_it(limited):
    _, url = limited
    refused = httpx.post(f"{url}/v1/embeddings", content=b'{"input": "' + b"x" * 5000 + b'"}')
    assert refused.status_code == 413
    assert "4096 bytes" in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/chat/completions", '{"model": "tiny", "messages": [{"role": "user", '
         '"content": "\\ud800"}]}', "body.messages[0].content"),
        ("/v1/score", '{"prompt": "p", "candidates": ["\\udfff"]}', "body.candidates[0]"),
        ("/v1/embeddings", '{"input": "\\ud800"}', "body.input"),
        ("/v1/budgets/r", '{"\\ud800": 1}', "body"),
    ],
)  # fmt: skip
def test_a_lone_surrogate_is_a_400_naming_the_field(limited, path, body, field):
    _, url = limited
    answer = httpx.request(
        "PUT" if "budgets" in path else "POST", f"{url}{path}", content=body.encode()
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == field
    # a surrogate pair (a real character) is fine
    emoji = httpx.post(f"{url}/v1/count_tokens", content=b'{"input": "\\ud83d\\ude00"}')
    assert emoji.status_code == 200


@pytest.mark.parametrize(("usd", "field"), [("ten", "usd"), ([1], "usd"), (True, "usd")])
def test_a_budget_of_the_wrong_type_is_422(limited, usd, field):
    _, url = limited
    answer = httpx.put(f"{url}/v1/budgets/r", json={"usd": usd})
    assert answer.status_code == 422 and answer.json()["error"]["param"] == field
    assert httpx.put(f"{url}/v1/budgets/r", json={"calls": "3"}).status_code == 422
    assert httpx.put(f"{url}/v1/budgets/r", json={"usd": 1.5}).status_code == 200


class ForwardCounter:
    """Counts the model's forward passes (one per decoding step) and runs them (a spy)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, model: Any) -> None:
        self.calls = 0
        real = model.forward

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(model, "forward", counted)


def test_a_timed_out_generation_stops_and_frees_the_model(make_gateway, monkeypatch):
    from llmrl.llm_gateway.api_types import GenerateRequest
    from llmrl.llm_gateway.errors import GatewayTimeoutError

    gateway = make_gateway(models={"tiny": {"max_context_tokens": 4096}})
    backend = gateway.backend("tiny")
    steps = ForwardCounter(monkeypatch, backend.lm.model)
    long = GenerateRequest(model="tiny", prompt="Count:", max_tokens=3000, cache="bypass")
    # the error says what gives it more time (the user's next step on a busy machine)
    with pytest.raises(GatewayTimeoutError, match=r"did not answer.*models\.tiny\.timeout_s"):
        backend.generate(long.validate(), "", timeout_s=0.3)
    # the model thread serves requests one batch at a time: this answer means it is free again
    short = GenerateRequest(model="tiny", prompt="Hi", max_tokens=2, cache="bypass")
    assert backend.generate(short.validate(), "", timeout_s=60).completion_tokens <= 2
    assert steps.calls < 1500  # the abandoned generation stopped early, far from 3000 steps


def test_closing_the_gateway_stops_a_generation_in_progress(make_gateway, monkeypatch):
    import threading

    from llmrl.llm_gateway.api_types import GenerateRequest
    from llmrl.llm_gateway.errors import GatewayTimeoutError

    gateway = make_gateway(models={"tiny": {"max_context_tokens": 4096}})
    backend = gateway.backend("tiny")
    steps = ForwardCounter(monkeypatch, backend.lm.model)
    long = GenerateRequest(model="tiny", prompt="Count:", max_tokens=3000, cache="bypass")
    outcome: list[Any] = []

    def call() -> None:
        try:
            outcome.append(backend.generate(long.validate(), "", timeout_s=600))
        except GatewayTimeoutError as exc:  # cut short: an error, never a cached answer
            outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    while steps.calls < 5:  # generation is under way
        threading.Event().wait(0.01)
    backend.close()  # what SIGTERM does after the grace period
    caller.join(60)
    assert not caller.is_alive() and isinstance(outcome[0], GatewayTimeoutError)
    assert steps.calls < 1500


def test_a_disconnected_client_stops_its_generation(make_gateway, monkeypatch):
    gateway = make_gateway(models={"tiny": {"max_context_tokens": 4096}})
    steps = ForwardCounter(monkeypatch, gateway.backend("tiny").lm.model)
    server = RestServer(create_app(gateway)).start()
    try:
        body = {"model": "tiny", "prompt": "Count:", "max_tokens": 3000}
        with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its connection
            httpx.post(f"{server.url}/v1/completions", json=body, timeout=0.5)
        short = {"model": "tiny", "prompt": "Hi", "max_tokens": 2}
        assert httpx.post(f"{server.url}/v1/completions", json=short, timeout=60).is_success
        assert steps.calls < 1500  # the model was freed long before 3000 steps
    finally:
        server.stop()


def test_sigterm_stops_the_gateway_within_its_grace_period_mid_generation(tiny_model_dir, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import threading

    import yaml
    from support.net import free_port

    from llmrl.llm_gateway.service import GRACE_ENV

    grace_s = 1  # far shorter than the generation below takes on any CPU (8000 tokens)
    config = tmp_path / "gateway.yaml"
    model = {"backend": "hf", "path": str(tiny_model_dir), "max_context_tokens": 8192}
    config.write_text(yaml.safe_dump({"default_model": "tiny", "models": {"tiny": model}}))
    port = free_port()
    env = {**os.environ, "LLMRL_HOME": str(tmp_path), GRACE_ENV: str(grace_s)}
    process = subprocess.Popen(
        [sys.executable, "-m", "llmrl.cli", "serve", "llm_gateway", "--port", str(port),
         "--grpc-port", str(free_port()), "--config", str(config)],  # never the default port
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):  # up to the first answer of /health
            assert process.poll() is None, process.stdout.read()  # type: ignore[union-attr]
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                threading.Event().wait(0.1)
        # load the model first: the SIGTERM below must find a generation under way, not a load
        warm = {"model": "tiny", "prompt": "Count:", "max_tokens": 1}
        assert httpx.post(f"{url}/v1/completions", json=warm, timeout=120).status_code == 200
        body = {"model": "tiny", "prompt": "Count:", "max_tokens": 8000}  # minutes of work
        answers: list[httpx.Response | Exception] = []

        def generate() -> None:
            try:
                answers.append(httpx.post(f"{url}/v1/completions", json=body, timeout=300))
            except httpx.HTTPError as exc:  # the connection closed under it: cut short too
                answers.append(exc)

        long = threading.Thread(target=generate, daemon=True)
        long.start()
        threading.Event().wait(1.0)  # the generation is under way
        process.send_signal(signal.SIGTERM)
        # the grace period, then closing and exit; the margin is for a loaded CI machine
        output, _ = process.communicate(timeout=grace_s + 30)
        long.join(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output
    # the request in flight was cut short at the end of the grace period, not run to its end
    assert len(answers) == 1
    assert not isinstance(answers[0], httpx.Response) or answers[0].status_code != 200
    assert "llm gateway stopped" in output


@pytest.mark.parametrize("raw", ["0", "-3", "ten", "1.5"])
def test_a_bad_grace_period_is_refused_by_its_variable(raw, monkeypatch):
    from llmrl.llm_gateway.service import GRACE_ENV, grace_period_s

    monkeypatch.setenv(GRACE_ENV, raw)
    with pytest.raises(ValueError, match=GRACE_ENV):
        grace_period_s()


def test_the_grace_period_defaults_to_ten_seconds_and_follows_its_variable(monkeypatch):
    from llmrl.llm_gateway.service import GRACE_ENV, grace_period_s

    monkeypatch.delenv(GRACE_ENV, raising=False)
    assert grace_period_s() == 10
    monkeypatch.setenv(GRACE_ENV, "3")
    assert grace_period_s() == 3
