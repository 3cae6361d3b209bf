"""Work queues with at-least-once delivery: Redis Streams (service mode) and in-memory (embedded).

A `WorkQueue` is a stream of JSON payloads read by a consumer group. `get` hands a message to
one consumer and keeps it *pending* until that consumer `ack`s it; a pending message whose
consumer went quiet for `claim_idle_s` (crashed, SIGKILLed, lost its network) is handed to the
next consumer that asks (Redis: XAUTOCLAIM). A consumer busy with a long job calls `touch` now
and then so that its message is not taken from it. Delivery is therefore at-least-once: a
job can run twice, and whoever stores results must do so idempotently (the run store keys
episodes by (run_id, episode_id)).

A `Broker` bundles what the orchestrator and the rollout workers share: the `jobs` queue
(group "workers"), the `results` queue (group "orchestrator"), a set of episodes already done
(so that a re-delivered job is skipped instead of re-run) and the set of cancelled runs.
`make_broker(None)` gives the in-memory broker, `make_broker("redis://...")` the Redis one.

A queue can lose messages only when its Redis does (a crash that cut the AOF's last second, a
restart without persistence, a flush, an eviction). `generation` names the queue's life so far
in a constant number of calls, and changes after any of these; `missing` says which of a list
of message ids the queue no longer holds. A producer that remembers the ids it put and the
generation it put them in therefore finds its lost jobs by checking only its own ids, and only
after the generation changed: never by walking the whole stream (every run's backlog).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

DEFAULT_CLAIM_IDLE_S = 30.0
KEY_PREFIX = "llmrl"


@dataclass
class Delivery:
    """One message handed to a consumer; pass it back to `ack`/`touch`."""

    message_id: str
    payload: dict[str, Any]


class WorkQueue(ABC):
    """A stream of jobs consumed by one group of consumers, at least once each."""

    claim_idle_s: float

    @abstractmethod
    def put(self, payload: dict[str, Any]) -> str:
        """Append a message; returns its id."""

    def put_many(self, payloads: list[dict[str, Any]]) -> list[str]:
        return [self.put(payload) for payload in payloads]

    @abstractmethod
    def get(self, consumer: str, count: int = 1, block_s: float = 1.0) -> list[Delivery]:
        """Up to `count` messages for `consumer`: reclaimed stale ones first, then new ones.

        Waits up to `block_s` seconds when there is nothing; returns [] then.
        """

    @abstractmethod
    def ack(self, delivery: Delivery) -> None:
        """The consumer is done with the message: it is never delivered again."""

    @abstractmethod
    def touch(self, consumer: str, delivery: Delivery) -> None:
        """The consumer still works on the message: restart its idle clock."""

    @abstractmethod
    def backlog(self) -> int:
        """Messages not yet acknowledged (waiting or pending)."""

    @abstractmethod
    def payloads(self) -> Iterator[dict[str, Any]]:
        """Every message not yet acknowledged (a scan: for tests and tools, not hot paths)."""

    def generation(self) -> str:
        """A name for the queue's life so far: it changes whenever messages may have been lost
        since (its Redis restarted, was flushed or evicted the stream); constant for a queue
        that cannot lose them. A constant number of calls, whatever the backlog."""
        return "in-process"

    @abstractmethod
    def missing(self, message_ids: Iterable[str]) -> set[str]:
        """The ids among `message_ids` the queue no longer holds (acknowledged, or lost);
        work in proportion to the ids asked about, not to the backlog."""


class Broker(ABC):
    jobs: WorkQueue
    results: WorkQueue

    @abstractmethod
    def mark_done(self, run_id: str, episode_id: str) -> None: ...

    @abstractmethod
    def is_done(self, run_id: str, episode_id: str) -> bool: ...

    @abstractmethod
    def cancel_run(self, run_id: str) -> None: ...

    @abstractmethod
    def is_cancelled(self, run_id: str) -> bool: ...

    @abstractmethod
    def forget_run(self, run_id: str) -> None:
        """Drop the run's done-set (the run has ended and its episodes are stored)."""

    def ping(self) -> bool:
        return True

    def close(self) -> None:  # noqa: B027 - optional
        pass


# -- in-memory ----------------------------------------------------------------------------
class InMemoryQueue(WorkQueue):
    """The embedded-mode queue: same semantics as the Redis one, inside one process."""

    def __init__(self, claim_idle_s: float = DEFAULT_CLAIM_IDLE_S) -> None:
        self.claim_idle_s = claim_idle_s
        self._waiting: OrderedDict[str, dict[str, Any]] = OrderedDict()
        # message id -> (payload, consumer, time of delivery or last touch)
        self._pending: dict[str, tuple[dict[str, Any], str, float]] = {}
        self._ids = itertools.count(1)
        self._cond = threading.Condition()

    def put(self, payload: dict[str, Any]) -> str:
        with self._cond:
            message_id = f"{next(self._ids)}-0"
            self._waiting[message_id] = json.loads(json.dumps(payload))  # same copy as on a wire
            self._cond.notify_all()
            return message_id

    def get(self, consumer: str, count: int = 1, block_s: float = 1.0) -> list[Delivery]:
        deadline = time.monotonic() + block_s
        with self._cond:
            while True:
                taken = self._reclaim(consumer, count)
                while self._waiting and len(taken) < count:
                    message_id, payload = self._waiting.popitem(last=False)
                    self._pending[message_id] = (payload, consumer, time.monotonic())
                    taken.append(Delivery(message_id, payload))
                remaining = deadline - time.monotonic()
                if taken or remaining <= 0:
                    return taken
                self._cond.wait(min(remaining, max(self.claim_idle_s / 4, 0.01)))

    def _reclaim(self, consumer: str, count: int) -> list[Delivery]:
        now, taken = time.monotonic(), []
        for message_id, (payload, _, since) in list(self._pending.items()):
            if len(taken) >= count:
                break
            if now - since >= self.claim_idle_s:
                self._pending[message_id] = (payload, consumer, now)
                taken.append(Delivery(message_id, payload))
        return taken

    def ack(self, delivery: Delivery) -> None:
        with self._cond:
            self._pending.pop(delivery.message_id, None)

    def touch(self, consumer: str, delivery: Delivery) -> None:
        with self._cond:
            if delivery.message_id in self._pending:
                self._pending[delivery.message_id] = (delivery.payload, consumer, time.monotonic())

    def backlog(self) -> int:
        with self._cond:
            return len(self._waiting) + len(self._pending)

    def payloads(self) -> Iterator[dict[str, Any]]:
        with self._cond:
            found = list(self._waiting.values()) + [p for p, _, _ in self._pending.values()]
        yield from found

    def missing(self, message_ids: Iterable[str]) -> set[str]:
        with self._cond:
            return {i for i in message_ids if i not in self._waiting and i not in self._pending}


class InMemoryBroker(Broker):
    def __init__(self, claim_idle_s: float = DEFAULT_CLAIM_IDLE_S) -> None:
        self.jobs = InMemoryQueue(claim_idle_s)
        self.results = InMemoryQueue(claim_idle_s)
        self._done: set[tuple[str, str]] = set()
        self._cancelled: set[str] = set()
        self._lock = threading.Lock()

    def mark_done(self, run_id: str, episode_id: str) -> None:
        with self._lock:
            self._done.add((run_id, episode_id))

    def is_done(self, run_id: str, episode_id: str) -> bool:
        with self._lock:
            return (run_id, episode_id) in self._done

    def cancel_run(self, run_id: str) -> None:
        with self._lock:
            self._cancelled.add(run_id)

    def is_cancelled(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._cancelled

    def forget_run(self, run_id: str) -> None:
        with self._lock:
            self._done = {key for key in self._done if key[0] != run_id}


# -- Redis Streams -------------------------------------------------------------------------
class RedisStreamQueue(WorkQueue):
    """A Redis stream with one consumer group: XADD, XREADGROUP, XACK(+XDEL), XAUTOCLAIM."""

    def __init__(
        self, client: Any, stream: str, group: str, claim_idle_s: float = DEFAULT_CLAIM_IDLE_S
    ) -> None:
        self.client, self.stream, self.group = client, stream, group
        self.claim_idle_s = claim_idle_s
        self._group_ready = False
        self._marker = f"{stream}:generation"  # gone with a flush or an eviction

    def _ensure_group(self) -> None:
        # Re-checked after connection errors: a Redis restarted without persistence has lost it.
        if self._group_ready:
            return
        import redis

        try:
            self.client.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        import redis

        self._ensure_group()
        try:
            return fn(*args, **kwargs)
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self._group_ready = False
            self._ensure_group()
            return fn(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError):
            self._group_ready = False
            raise

    def put(self, payload: dict[str, Any]) -> str:
        return _text(self._call(self.client.xadd, self.stream, {"data": json.dumps(payload)}))

    def put_many(self, payloads: list[dict[str, Any]]) -> list[str]:
        def send() -> list[str]:
            pipe = self.client.pipeline(transaction=False)
            for payload in payloads:
                pipe.xadd(self.stream, {"data": json.dumps(payload)})
            return [_text(message_id) for message_id in pipe.execute()]

        return self._call(send) if payloads else []

    def get(self, consumer: str, count: int = 1, block_s: float = 1.0) -> list[Delivery]:
        claimed = self._call(
            self.client.xautoclaim,
            self.stream,
            self.group,
            consumer,
            min_idle_time=int(self.claim_idle_s * 1000),
            start_id="0-0",
            count=count,
        )
        deliveries = _deliveries(claimed[1])
        if deliveries:
            return deliveries
        answer = self._call(
            self.client.xreadgroup,
            self.group,
            consumer,
            {self.stream: ">"},
            count=count,
            block=max(1, int(block_s * 1000)),
        )
        return _deliveries(answer[0][1]) if answer else []

    def ack(self, delivery: Delivery) -> None:
        def send() -> None:
            pipe = self.client.pipeline(transaction=True)
            pipe.xack(self.stream, self.group, delivery.message_id)
            pipe.xdel(self.stream, delivery.message_id)  # keeps the stream as small as the work
            pipe.execute()

        self._call(send)

    def touch(self, consumer: str, delivery: Delivery) -> None:
        self._call(
            self.client.xclaim,
            self.stream,
            self.group,
            consumer,
            min_idle_time=0,
            message_ids=[delivery.message_id],
            justid=True,
        )

    def backlog(self) -> int:
        return int(self._call(self.client.xlen, self.stream))

    def payloads(self) -> Iterator[dict[str, Any]]:
        # Acknowledged messages are deleted (see ack), so the stream holds exactly the rest.
        start = "-"
        while True:
            batch = self._call(self.client.xrange, self.stream, start, "+", count=1000)
            yield from (delivery.payload for delivery in _deliveries(batch))
            if len(batch) < 1000:
                return
            last = batch[-1][0]
            start = "(" + (last.decode() if isinstance(last, bytes) else last)

    def generation(self) -> str:
        """The Redis server's `run_id` (new at every start: a crash, a restart, a failover)
        and a marker key beside the stream (new after a flush or an eviction): three calls."""
        import redis

        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            pipe.set(self._marker, uuid.uuid4().hex, nx=True)
            pipe.get(self._marker)
            pipe.info("server")
            return pipe.execute()

        try:
            _, marker, server = self._call(read)
        except redis.ResponseError:  # INFO refused (a managed Redis): assume the worst
            return f"unknown-{uuid.uuid4().hex}"
        return f"{server.get('run_id', 'unknown')}/{_text(marker)}"

    def missing(self, message_ids: Iterable[str]) -> set[str]:
        ids, gone = list(message_ids), set()
        for start in range(0, len(ids), 1000):
            chunk = ids[start : start + 1000]

            def look(chunk: list[str] = chunk) -> list[Any]:
                pipe = self.client.pipeline(transaction=False)
                for message_id in chunk:
                    pipe.xrange(self.stream, message_id, message_id, count=1)
                return pipe.execute()

            found = self._call(look)
            gone.update(i for i, entries in zip(chunk, found, strict=True) if not entries)
        return gone


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _deliveries(messages: list[Any]) -> list[Delivery]:
    deliveries = []
    for message_id, fields in messages:
        if not fields:  # deleted while pending
            continue
        data = fields.get(b"data") if b"data" in fields else fields.get("data")
        if isinstance(data, bytes):
            data = data.decode()
        deliveries.append(
            Delivery(
                message_id.decode() if isinstance(message_id, bytes) else message_id,
                json.loads(data),
            )
        )
    return deliveries


class RedisBroker(Broker):
    def __init__(
        self,
        url: str,
        claim_idle_s: float = DEFAULT_CLAIM_IDLE_S,
        prefix: str = KEY_PREFIX,
    ) -> None:
        import redis

        self.url = url
        self.client = redis.Redis.from_url(url, socket_timeout=30, health_check_interval=10)
        self.prefix = prefix
        self.jobs = RedisStreamQueue(self.client, f"{prefix}:jobs", "workers", claim_idle_s)
        self.results = RedisStreamQueue(
            self.client, f"{prefix}:results", "orchestrator", claim_idle_s
        )

    def _done_key(self, run_id: str) -> str:
        return f"{self.prefix}:done:{run_id}"

    def mark_done(self, run_id: str, episode_id: str) -> None:
        self.client.sadd(self._done_key(run_id), episode_id)

    def is_done(self, run_id: str, episode_id: str) -> bool:
        return bool(self.client.sismember(self._done_key(run_id), episode_id))

    def cancel_run(self, run_id: str) -> None:
        self.client.sadd(f"{self.prefix}:cancelled", run_id)

    def is_cancelled(self, run_id: str) -> bool:
        return bool(self.client.sismember(f"{self.prefix}:cancelled", run_id))

    def forget_run(self, run_id: str) -> None:
        self.client.delete(self._done_key(run_id))

    def ping(self) -> bool:
        import redis

        try:
            return bool(self.client.ping())
        except (redis.ConnectionError, redis.TimeoutError):
            return False

    def close(self) -> None:
        self.client.close()


def make_broker(redis_url: str | None, claim_idle_s: float = DEFAULT_CLAIM_IDLE_S) -> Broker:
    """The in-memory broker for None, else a Redis broker on `redis_url`."""
    if redis_url is None:
        return InMemoryBroker(claim_idle_s)
    return RedisBroker(redis_url, claim_idle_s)


def retry_on_disconnect(
    fn: Any,
    timeout_s: float = 120.0,
    give_up: Any = lambda: False,
    interval_s: float = 0.25,
) -> Any:
    """Call `fn()`, retrying while Redis is unreachable (restarting) for up to `timeout_s`.

    Other errors propagate at once; so does the last connection error after the timeout or
    when `give_up()` becomes true.
    """
    try:
        import redis

        transient: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError)
    except ModuleNotFoundError:  # in-memory only: nothing is transient
        return fn()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn()
        except transient:
            if time.monotonic() >= deadline or give_up():
                raise
            time.sleep(interval_s)
