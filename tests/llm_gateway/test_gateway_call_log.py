"""Each run's calls kept beside the ledger (request as hashed, answer), and the `replay`
backend that answers them again from a bundle with no model behind it."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llmrl.llm_gateway.api_types import EmbedRequest, GenerateRequest, ScoreRequest
from llmrl.llm_gateway.cache import document_key, key_document
from llmrl.llm_gateway.errors import ReplayMissError
from llmrl.llm_gateway.gateway import Gateway
from llmrl.llm_gateway.ledger_store import RedisLedgerStore, SqliteLedgerStore
from llmrl.llm_gateway.replay_bundle import FORMAT, VERSION, read_bundle, write_bundle

CHAT = [{"role": "user", "content": "Where is the key?"}]


def chat(gw: Gateway, run_id: str, **options: Any) -> Any:
    request = GenerateRequest(messages=CHAT, run_id=run_id, **{"max_tokens": 6, **options})
    return gw.generate(request.validate())


def score(gw: Gateway, run_id: str) -> Any:
    request = ScoreRequest(prompt="You see a door.", candidates=[" open it", " go left"],
                           run_id=run_id)  # fmt: skip
    return gw.score(request)


def test_a_runs_calls_are_kept_once_each_hits_and_misses_with_request_and_answer(make_gateway):
    gw = make_gateway()
    first, again = chat(gw, "r1"), chat(gw, "r1")
    assert not first.cached and again.cached
    scored = score(gw, "r1")
    chat(gw, "default")  # the catch-all run is nobody's run: nothing kept
    calls, note = gw.ledger.calls("r1")
    assert [(c["op"], c["model"], c["cached"], c["sampled"]) for c in calls] == [
        ("chat", "tiny", False, False),
        ("score", "tiny", False, False),
    ]
    asked = calls[0]
    assert document_key(asked["request"]) == asked["key"]  # the request as the cache hashed it
    assert asked["request"]["params"]["messages"] == CHAT
    assert asked["answer"]["texts"] == first.texts
    assert calls[1]["answer"]["token_logprobs"] == scored.token_logprobs
    assert note["default_model"] == "tiny" and note["cache"]["backend"] == "sqlite"
    assert note["models"]["tiny"]["backend"] == "hf" and note["models"]["tiny"]["price"]
    assert gw.ledger.calls("default") == ([], None)

    chat(gw, "r2")  # another run asks the same: the cache answers, and r2 keeps it as such
    (kept,), _ = gw.ledger.calls("r2")
    assert kept["cached"] and kept["key"] == asked["key"] and kept["answer"] == asked["answer"]


def test_sampled_calls_are_kept_at_every_occurrence_in_order(make_gateway):
    gw = make_gateway()
    answers = [chat(gw, "s", temperature=1.5).texts for _ in range(3)]
    seeded = [chat(gw, "s", temperature=1.5, seed=7).texts for _ in range(2)]
    assert seeded[0] == seeded[1]
    calls, _ = gw.ledger.calls("s")
    deterministic = [c for c in calls if not c["sampled"]]
    sampled = [c for c in calls if c["sampled"]]
    assert len(deterministic) == 1 and deterministic[0]["answer"]["texts"] == seeded[0]
    assert [c["answer"]["texts"] for c in sampled] == answers
    assert len({c["key"] for c in sampled}) == 1  # one request, three answers


def test_kept_calls_outlive_the_gateway_and_can_be_turned_off(make_gateway, tmp_path: Path):
    gw = make_gateway()
    chat(gw, "kept")
    gw.close()
    store = SqliteLedgerStore(tmp_path / "ledger.sqlite")  # where tiny_settings keep the ledger
    try:
        calls, note = store.run_calls("kept")
    finally:
        store.close()
    assert len(calls) == 1 and note is not None

    quiet = make_gateway(ledger={"record_calls": False, "sqlite_path": str(tmp_path / "q.sqlite")})
    chat(quiet, "off")
    assert quiet.ledger.calls("off") == ([], None)
    assert quiet.usage("off")["requests"] == 1  # accounted all the same


def test_redis_keeps_calls_as_sqlite_does(redis_url: str, tmp_path: Path):
    def call(key: str, sampled: bool, text: str) -> dict[str, Any]:
        return {"key": key, "op": "chat", "model": "m", "request": {}, "sampled": sampled,
                "cached": False, "answer": {"texts": [text]}}  # fmt: skip

    rows = [
        ("run", call("a" * 64, False, "first")),
        ("run", call("a" * 64, False, "again")),  # a deterministic call: the first stays
        ("run", call("b" * 64, True, "one")),
        ("run", call("b" * 64, True, "two")),  # sampled: every occurrence, in order
        ("other", call("c" * 64, False, "x")),
    ]
    for store in (
        RedisLedgerStore(redis_url, key="test:call_log"),
        SqliteLedgerStore(tmp_path / "ledger.sqlite"),
    ):
        try:
            store.save_calls(rows[:2], {"run": {"note": 1}})
            store.save_calls(rows[2:], {"run": {"note": 2}})
            calls, note = store.run_calls("run")
        finally:
            store.close()
        assert [c["answer"]["texts"][0] for c in calls] == ["first", "one", "two"]
        assert note == {"note": 1}


# -- the replay backend -------------------------------------------------------------------------
def bundle_of(calls: list[dict[str, Any]], note: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "created": "now",
        "run": {"run_id": "r", "recipe": "evaluate", "config": {}, "status": "completed"},
        "results": {"title": "t", "rows": []},
        "gateway": note,
        "calls": calls,
        "summary": {"requests": len(calls), "calls": len(calls), "sampled": 0},
    }


def replay_gateway(bundle: Path, *names: str) -> Gateway:
    from llmrl.llm_gateway.replay_bundle import serve_bundle

    serve_bundle(bundle, read_bundle(bundle))  # every sampled answer unused
    models = {name: {"backend": "replay", "bundle": str(bundle)} for name in names}
    settings = {
        "default_model": names[0],
        "default_embedding_model": names[-1],
        "models": models,
        "cache": {"backend": "none"},
        "ledger": {"backend": "memory"},
    }
    return Gateway(settings)


def test_the_replay_backend_answers_as_the_run_was_answered_and_names_what_it_lacks(
    make_gateway, tmp_path: Path
):
    recorded = make_gateway(ledger={"backend": "memory"})
    original = chat(recorded, "run")
    guided = chat(recorded, "run", guided_lines={"choices": ["go left", "go right"]})
    sampled = [chat(recorded, "run", temperature=1.5).texts for _ in range(2)]
    scored = score(recorded, "run")
    calls, note = recorded.ledger.calls("run")
    path = tmp_path / "run.json.gz"
    write_bundle(bundle_of(calls, note), path)

    replayed = replay_gateway(path, "tiny")
    try:
        again = chat(replayed, "replay")
        assert (again.texts, again.prompt_tokens, again.completion_tokens) == (
            original.texts, original.prompt_tokens, original.completion_tokens,
        )  # fmt: skip
        assert chat(replayed, "replay", guided_lines={"choices": ["go right", "go left"]}).texts \
            == guided.texts  # fmt: skip
        assert [chat(replayed, "replay", temperature=1.5).texts for _ in range(2)] == sampled
        with pytest.raises(ReplayMissError, match="used up"):
            chat(replayed, "replay", temperature=1.5)
        rescored = score(replayed, "replay")
        assert rescored.token_logprobs == scored.token_logprobs
        assert rescored.prompt_tokens == scored.prompt_tokens
        request = GenerateRequest(messages=[{"role": "user", "content": "Something  new\nhere"}],
                                  run_id="replay", max_tokens=6)  # fmt: skip
        with pytest.raises(ReplayMissError) as missed:
            replayed.generate(request.validate())
        message = str(missed.value)
        assert "model 'tiny'" in message and "chat" in message
        assert "'user: Something new here'" in message  # the prompt's start, on one line
        with pytest.raises(ReplayMissError, match="no answer"):
            chat(replayed, "replay", max_tokens=7)  # any parameter makes another call
        assert "hf" not in {type(b).__name__ for b in replayed._backends.values()}
        assert {type(b).__name__ for b in replayed._backends.values()} == {"ReplayBackend"}
    finally:
        replayed.close()


def test_the_replay_backend_answers_embeddings(tmp_path: Path):
    texts = ["chop tree", "collect wood"]
    vectors = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    identity = "sentence_transformers:builtin:all-minilm-l6-v2"
    document = key_document("embed", "sentence_transformers", identity, "", texts=texts)
    call = {
        "key": document_key(document), "op": "embed", "model": "minilm", "request": document,
        "answer": {"vectors": base64.b64encode(vectors.tobytes()).decode(), "shape": [2, 3],
                   "prompt_tokens": 9, "completion_tokens": 0},
        "sampled": False, "cached": False,
    }  # fmt: skip
    path = tmp_path / "embed.json.gz"
    write_bundle(bundle_of([call], None), path)
    replayed = replay_gateway(path, "minilm")
    try:
        result = replayed.embed(EmbedRequest(texts=texts, run_id="replay"))
        assert np.array_equal(result.vectors, vectors) and result.prompt_tokens == 9
        with pytest.raises(ReplayMissError, match="embed"):
            replayed.embed(EmbedRequest(texts=["other"], run_id="replay"))
    finally:
        replayed.close()


def test_a_call_records_dict_holds_every_field() -> None:
    from dataclasses import fields

    from llmrl.llm_gateway.call_log import CallRecord

    record = CallRecord("k", "chat", "m", {"op": "chat"}, {"texts": ["a"]}, True, False)
    assert list(record.to_dict()) == [f.name for f in fields(CallRecord)]
    assert record.to_dict()["answer"] == {"texts": ["a"]} and record.to_dict()["sampled"] is True
