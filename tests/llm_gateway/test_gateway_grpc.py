"""The gRPC service and client: the same results and the same exceptions as in-process, and
the documented status codes (INVALID_ARGUMENT, RESOURCE_EXHAUSTED) on the wire."""

from __future__ import annotations

import threading
import time

import grpc
import numpy as np
import pytest
from support.net import free_port

from llmrl.llm_gateway.client import RETRY_VAR, InProcessClient, connect
from llmrl.llm_gateway.errors import (
    BudgetExceededError,
    GatewayError,
    InvalidRequestError,
    UnknownModelError,
)
from llmrl.llm_gateway.grpc_server import start_grpc_server
from llmrl.llm_gateway.v1 import llm_gateway_pb2 as pb
from llmrl.llm_gateway.v1 import llm_gateway_pb2_grpc as pb_grpc


@pytest.fixture
def served(gateway):
    server = start_grpc_server(gateway, "127.0.0.1", 0)
    address = f"127.0.0.1:{server.port}"
    remote = connect(address)
    yield gateway, address, remote
    remote.close()
    server.stop(0)


def test_grpc_and_in_process_clients_agree(served):
    gateway, _, remote = served
    local = InProcessClient(gateway, owns_gateway=False)
    messages = [{"role": "user", "content": "Which door?"}]
    first = local.chat(messages, max_tokens=6, run_id="same", tag="a")
    over_grpc = remote.chat(messages, max_tokens=6, run_id="same", tag="a")
    assert over_grpc.texts == first.texts and over_grpc.cached and not first.cached
    assert (over_grpc.prompt_tokens, over_grpc.completion_tokens) == (
        first.prompt_tokens,
        first.completion_tokens,
    )
    candidates = [" the red one", " the blue one"]
    local_scores = local.score(messages, candidates, run_id="same", cache=False)
    remote_scores = remote.score(messages, candidates, run_id="same", cache=False)
    assert remote_scores.logprobs == pytest.approx(local_scores.logprobs, abs=1e-5)
    for remote_row, local_row in zip(
        remote_scores.token_logprobs, local_scores.token_logprobs, strict=True
    ):
        assert remote_row == pytest.approx(local_row, abs=1e-5)
    assert remote.complete("abc", max_tokens=3).texts == local.complete("abc", max_tokens=3).texts
    assert remote.count_tokens(messages) == local.count_tokens(messages)
    assert remote.count_tokens("hello world") == 2
    assert remote.models() == local.models()
    remote.set_budget("same", usd=3.0, calls=100)
    assert remote.usage("same") == local.usage("same")
    usage = remote.usage("same")
    assert usage["tags"]["a"]["cache_hits"] == 1 and usage["budget"]["calls"] == 100


def test_grpc_embeddings_match(served):
    gateway, _, remote = served
    local = InProcessClient(gateway, owns_gateway=False)
    vectors = remote.embed(["chop tree", "collect wood"], cache=False)
    assert vectors.dtype == np.float32 and vectors.shape == (2, 384)
    assert np.allclose(vectors, local.embed(["chop tree", "collect wood"], cache=False))


@pytest.mark.parametrize(
    ("call", "error", "field"),
    [
        (lambda c: c.chat("hi", max_tokens=-1), InvalidRequestError, "max_tokens"),
        (lambda c: c.chat([]), InvalidRequestError, "messages"),
        (
            lambda c: c.chat([{"role": "bot", "content": "x"}]),
            InvalidRequestError,
            "messages[0].role",
        ),
        (lambda c: c.chat("hi", model="nope"), UnknownModelError, "model"),
        (lambda c: c.score("p", ["a"] * 65), InvalidRequestError, "candidates"),
        (lambda c: c.set_budget("r", usd=-2), InvalidRequestError, "usd"),
    ],
)
def test_both_clients_raise_the_same_errors(served, call, error, field):
    gateway, _, remote = served
    for client in (InProcessClient(gateway, owns_gateway=False), remote):
        with pytest.raises(error) as caught:
            call(client)
        assert caught.value.field == field


def raw_call(address: str, request: pb.GatewayRequest) -> grpc.RpcError:
    with grpc.insecure_channel(address) as channel, pytest.raises(grpc.RpcError) as caught:
        pb_grpc.LlmGatewayStub(channel).Process(request)
    return caught.value


def test_each_request_is_answered_by_its_own_response_message(served):
    _gateway, address, _remote = served
    params = pb.GenerationParams(max_tokens=2)
    requests = {
        "chat": pb.GatewayRequest(
            chat=pb.ChatRequest(messages=[pb.ChatMessage(role="user", content="x")], params=params)
        ),
        "completion": pb.GatewayRequest(
            completion=pb.CompletionRequest(prompt="abc", params=params)
        ),
        "count_tokens": pb.GatewayRequest(count_tokens=pb.CountTokensRequest(text="hello world")),
        "list_models": pb.GatewayRequest(list_models=pb.ListModelsRequest()),
    }
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.LlmGatewayStub(channel)
        for slot, request in requests.items():
            response = stub.Process(request)
            assert response.WhichOneof("payload") == slot
            answer = getattr(response, slot)
            request_type = type(getattr(request, slot)).DESCRIPTOR.name
            assert answer.DESCRIPTOR.name == request_type.replace("Request", "Response")


def test_status_codes_on_the_wire(served):
    _gateway, address, remote = served
    bad = pb.GatewayRequest(
        chat=pb.ChatRequest(
            messages=[pb.ChatMessage(role="user", content="x")],
            params=pb.GenerationParams(max_tokens=-5),
        )
    )
    error = raw_call(address, bad)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "max_tokens" in error.details()
    assert dict(error.trailing_metadata())["llmrl-error-field"] == "max_tokens"
    assert raw_call(address, pb.GatewayRequest()).code() == grpc.StatusCode.INVALID_ARGUMENT

    remote.set_budget("broke", calls=0)
    spend = pb.GatewayRequest(
        chat=pb.ChatRequest(
            messages=[pb.ChatMessage(role="user", content="x")],
            context=pb.RequestContext(run_id="broke"),
        )
    )
    error = raw_call(address, spend)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "budget exceeded for run 'broke'" in error.details()
    with pytest.raises(BudgetExceededError):
        remote.chat("x", run_id="broke")
    assert remote.chat("still serving", max_tokens=2).texts  # one bad request harms nothing


def test_remote_connect_refuses_server_settings():
    with pytest.raises(InvalidRequestError, match="in-process"):
        connect("127.0.0.1:1", models={})


PROCESS = "/llmrl.llm_gateway.v1.LlmGateway/Process"
GOOD_BYTES = pb.GatewayRequest(
    completion=pb.CompletionRequest(prompt="x", params=pb.GenerationParams(max_tokens=1))
).SerializeToString()


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (b"\xff\xff\xff\xff", "no GatewayRequest"),  # corrupt wire format
        (GOOD_BYTES.replace(b"x", b"\xff"), "no GatewayRequest"),  # prompt is not UTF-8
        (b"\x12" + b"\x12\x02" * 200, "no GatewayRequest"),  # truncated nested messages
    ],
)
def test_malformed_request_bytes_are_invalid_argument(served, payload, says):
    _gateway, address, remote = served
    with grpc.insecure_channel(address) as channel, pytest.raises(grpc.RpcError) as caught:
        channel.unary_unary(PROCESS)(payload, timeout=30)  # the bytes, as they are
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert says in caught.value.details()
    assert dict(caught.value.trailing_metadata())["llmrl-error-field"] == "request"
    assert remote.count_tokens("hello world") == 2  # still serving


def test_a_gateway_that_starts_late_is_waited_for(gateway):
    """`llmrl up` starts every service at once: a run may ask the gateway before it listens
    (KALM's data phase embeds its instructions seconds after submission). The call waits
    for it and is answered; with nothing listening past the window it fails naming the
    gateway and the setting; a client told not to wait fails at once."""
    port = free_port()
    late = connect(f"127.0.0.1:{port}", retry_s=60)
    server: list = []
    starter = threading.Timer(
        1.5, lambda: server.append(start_grpc_server(gateway, "127.0.0.1", port))
    )
    starter.start()
    try:
        started = time.monotonic()
        assert late.count_tokens("hello world") == 2  # asked before the gateway listened
        assert 1.5 <= time.monotonic() - started < 30
    finally:
        starter.join()
        late.close()
        for running in server:
            running.stop(0)

    nowhere = f"127.0.0.1:{free_port()}"
    patient = connect(nowhere, retry_s=1.0)
    started = time.monotonic()
    with pytest.raises(GatewayError, match=f"could not be reached for 1 s.*{RETRY_VAR}"):
        patient.count_tokens("hello")
    assert 1.0 <= time.monotonic() - started < 10
    patient.close()
    impatient = connect(nowhere, retry_s=0)
    started = time.monotonic()
    with pytest.raises(GatewayError, match="failed: UNAVAILABLE"):
        impatient.count_tokens("hello")
    assert time.monotonic() - started < 5
    impatient.close()
