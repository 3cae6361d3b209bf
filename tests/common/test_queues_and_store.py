"""Queues (Redis Streams and in-memory, one behaviour) and the run store."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.processes import RedisServer

from llmrl.common.episodes import EpisodeRecord, LlmCall
from llmrl.common.queues import Broker, InMemoryBroker, RedisBroker, make_broker
from llmrl.common.store import COMPLETED, RunStore

IDLE = 0.3


@pytest.fixture(params=["memory", "redis"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Broker]:
    if request.param == "memory":
        yield InMemoryBroker(claim_idle_s=IDLE)
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    # A fresh key prefix per test: the streams of one test never leak into the next.
    broker = RedisBroker(server.url, claim_idle_s=IDLE, prefix=f"t{time.monotonic_ns()}")
    yield broker
    broker.close()


def test_each_message_goes_to_one_consumer_until_acknowledged(broker):
    ids = broker.jobs.put_many([{"n": i} for i in range(3)])
    assert len(set(ids)) == 3
    first = broker.jobs.get("a", count=2, block_s=0.5)
    second = broker.jobs.get("b", count=2, block_s=0.5)
    assert [d.payload["n"] for d in first] == [0, 1]
    assert [d.payload["n"] for d in second] == [2]
    for delivery in first + second:
        broker.jobs.ack(delivery)
    assert broker.jobs.get("c", count=5, block_s=IDLE * 2) == []
    assert broker.jobs.backlog() == 0


def test_a_silent_consumers_message_is_reclaimed_after_the_idle_timeout(broker):
    broker.jobs.put({"job": "x"})
    taken = broker.jobs.get("dead", block_s=0.5)
    assert len(taken) == 1
    assert broker.jobs.get("alive", block_s=0.05) == []  # not yet idle long enough
    time.sleep(IDLE * 1.5)
    reclaimed = broker.jobs.get("alive", block_s=0.5)
    assert [d.payload for d in reclaimed] == [{"job": "x"}]
    broker.jobs.ack(reclaimed[0])
    time.sleep(IDLE * 1.5)
    assert broker.jobs.get("third", block_s=0.05) == []


def test_touch_keeps_a_busy_consumers_message(broker):
    broker.jobs.put({"job": "long"})
    (delivery,) = broker.jobs.get("busy", block_s=0.5)
    for _ in range(4):
        time.sleep(IDLE / 2)
        broker.jobs.touch("busy", delivery)
        assert broker.jobs.get("thief", block_s=0.01) == []
    broker.jobs.ack(delivery)


def test_payloads_lists_every_unacknowledged_message(broker):
    broker.jobs.put_many([{"n": i} for i in range(1005)])  # more than one XRANGE page
    (taken,) = broker.jobs.get("a", block_s=0.5)
    broker.jobs.ack(taken)
    broker.jobs.get("b", block_s=0.5)  # pending, not acknowledged: still listed
    assert sorted(p["n"] for p in broker.jobs.payloads()) == list(range(1, 1005))


def test_missing_names_the_messages_no_longer_held_and_the_generation_holds(broker):
    ids = broker.jobs.put_many([{"n": i} for i in range(3)])
    generation = broker.jobs.generation()
    (taken,) = broker.jobs.get("a", block_s=0.5)
    assert broker.jobs.missing(ids) == set()  # pending still counts as held
    broker.jobs.ack(taken)
    assert broker.jobs.missing(ids) == {taken.message_id}
    assert broker.jobs.generation() == generation  # nothing was lost


def test_a_flushed_redis_changes_the_generation(redis_server):
    broker = RedisBroker(redis_server.url, prefix=f"t{time.monotonic_ns()}")
    ids = broker.jobs.put_many([{"n": 1}])
    generation = broker.jobs.generation()
    with redis_server.client() as client:
        client.delete(broker.jobs.stream, f"{broker.jobs.stream}:generation")  # as a flush
    assert broker.jobs.generation() != generation
    assert broker.jobs.missing(ids) == set(ids)
    broker.close()


def test_done_and_cancelled_flags(broker):
    assert not broker.is_done("r", "evaluate/0")
    broker.mark_done("r", "evaluate/0")
    assert broker.is_done("r", "evaluate/0") and not broker.is_done("other", "evaluate/0")
    broker.forget_run("r")
    assert not broker.is_done("r", "evaluate/0")
    broker.cancel_run("r")
    assert broker.is_cancelled("r") and not broker.is_cancelled("s")


def test_make_broker_picks_the_implementation(redis_server):
    assert isinstance(make_broker(None), InMemoryBroker)
    redis_broker = make_broker(redis_server.url)
    assert isinstance(redis_broker, RedisBroker) and redis_broker.ping()
    redis_broker.close()


def record(run_id: str, episode_id: str, cost: float = 0.0) -> EpisodeRecord:
    calls = [LlmCall(t=0, messages=[], response="go", prompt_tokens=3, cost_usd=cost)]
    rec = EpisodeRecord(run_id, episode_id, "TinyCorridor", 0, "oracle", llm_calls=calls)
    rec.metrics = {"llm_calls": 1.0, "llm_tokens": 3.0, "llm_cost_usd": cost}
    return rec


def test_store_keeps_an_episode_once_and_survives_reopening(tmp_path):
    path = tmp_path / "runs.sqlite"
    store = RunStore(path)
    run_id = store.create_run("evaluate", {"episodes": 2}, tmp_path / "out")
    assert store.store_episode(record(run_id, "evaluate/1", 0.5))
    assert not store.store_episode(record(run_id, "evaluate/1", 9.9))  # delivered twice
    assert store.store_episode(record(run_id, "evaluate/0", 0.25))
    store.start_phase(run_id, "evaluate")
    store.complete_phase(run_id, "evaluate", {"episodes": 2})
    store.close()

    reopened = RunStore(path)
    assert [e.episode_id for e in reopened.episodes(run_id)] == ["evaluate/0", "evaluate/1"]
    assert reopened.episodes(run_id, offset=1, limit=1)[0].episode_id == "evaluate/1"
    assert reopened.phase_outputs(run_id, "evaluate") == {"episodes": 2}
    assert reopened.phase_outputs(run_id, "report") is None
    assert reopened.llm_totals(run_id)["cost_usd"] == pytest.approx(0.75)
    assert [r.run_id for r in reopened.unfinished_runs()] == [run_id]
    reopened.update_run(run_id, status=COMPLETED)
    assert reopened.unfinished_runs() == []
    with pytest.raises(ValueError, match="<phase>/<index>"):
        reopened.store_episode(record(run_id, "no-index"))
