"""A lean JSON-over-HTTP/1.1 client for the `openai` backend's engines on plain `http://`.

The official `openai` client spends ~1.1 ms of CPU on a call (typed request transforms,
pydantic response models, its HTTP stack): on a cache miss against an engine that answers in
a few ms (vLLM, another llmrl gateway on the network) that was the largest share of the
gateway's own CPU (bench/gateway_peers.py). This client posts a JSON body and reads a JSON
answer with the standard library's `http.client` over keep-alive connections (~0.2 ms).

`lean_transport(base_url)` says where it is used: a plain `http://` URL that no proxy setting
covers (`HTTP_PROXY`/`ALL_PROXY` and `NO_PROXY`, as the SDK reads them). Everything else
(`https://`, OpenAI's own API, a proxy) keeps the SDK and its TLS and proxy handling.

It does no retries of its own (the gateway core retries, backs off and falls back), except
one: a request on a pooled keep-alive connection that the server had closed in the meantime
fails before any answer arrives; it is sent again at once on a fresh connection (a server
closes idle connections after its keep-alive timeout, 5 s in uvicorn: that is no failure of
the engine). Errors are this module's own (`UpstreamStatus`, `UpstreamTimeout`,
`UpstreamUnreachable`); the backend maps them as it maps the SDK's.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import select
import threading
import time
import urllib.parse
import urllib.request
from typing import Any

USER_AGENT = "llmrl-gateway"
MAX_IDLE = 64  # idle keep-alive connections kept per engine; more are closed when given back
IDLE_S = 4.0  # an idle connection older than this is closed, not reused (uvicorn closes at 5 s)
ERROR_TEXT_CHARS = 2000  # how much of an error answer's body its message quotes


class UpstreamStatus(Exception):
    """The engine answered with an HTTP error status."""

    def __init__(self, status: int, message: str, headers: dict[str, str]) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


class UpstreamTimeout(Exception):
    """The engine did not answer (connect, send or read) within the timeout."""


class UpstreamUnreachable(Exception):
    """The engine cannot be reached, or broke the connection before answering."""


class UpstreamBadAnswer(Exception):
    """The engine answered 2xx with a body that is not a JSON object."""


def lean_transport(base_url: str | None) -> bool:
    """Whether calls to `base_url` go through `JsonHttpClient`: a plain http URL with a host,
    and no proxy configured for that host."""
    if not base_url:
        return False
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme != "http" or not parts.hostname or parts.query or parts.fragment:
        return False
    proxies = urllib.request.getproxies()
    if not (proxies.get("http") or proxies.get("all")):
        return True
    return bool(urllib.request.proxy_bypass(parts.hostname))


def status_message(status: int, body: bytes) -> str:
    """What an error answer says, as the `openai` client words it: "Error code: <status> -
    <error.message>" (or the body's text when it has no OpenAI error object)."""
    text = body[:ERROR_TEXT_CHARS].decode("utf-8", errors="replace")
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        detail = error.get("message") if isinstance(error, dict) else error
        if isinstance(detail, str) and detail:
            text = detail[:ERROR_TEXT_CHARS]
        elif isinstance(data.get("message"), str):
            text = data["message"][:ERROR_TEXT_CHARS]
    return f"Error code: {status} - {text}"


class JsonHttpClient:
    """POST a JSON object to `<base_url><path>`, return the JSON object answered; a pool of
    keep-alive connections shared by the threads that call it (each request holds one)."""

    def __init__(self, base_url: str, api_key: str | None) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"{base_url!r} is not a plain http URL")
        self.host, self.port = parts.hostname, parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        }
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self._idle: list[tuple[http.client.HTTPConnection, float]] = []
        self._lock = threading.Lock()
        self._closed = False

    # -- connections -----------------------------------------------------------------------------
    def _pooled(self) -> http.client.HTTPConnection | None:
        """An idle connection the server has not closed, or None."""
        now = time.monotonic()
        while True:
            with self._lock:
                if not self._idle:
                    return None
                conn, since = self._idle.pop()
            sock = conn.sock
            if sock is None or now - since > IDLE_S or _readable(sock):
                conn.close()  # closed by the server (EOF is readable), or kept too long
                continue
            return conn

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < MAX_IDLE:
                self._idle.append((conn, time.monotonic()))
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            conn.close()

    # -- requests --------------------------------------------------------------------------------
    def post(self, path: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        conn = self._pooled()
        if conn is not None:
            try:
                return self._exchange(conn, path, data, timeout_s)
            except _StaleConnection:
                pass  # the server closed it before reading the request: once more, afresh
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)
        try:
            return self._exchange(conn, path, data, timeout_s)
        except _StaleConnection as exc:
            raise UpstreamUnreachable(str(exc.__cause__ or exc)) from None

    def _exchange(
        self, conn: http.client.HTTPConnection, path: str, data: bytes, timeout_s: float
    ) -> dict[str, Any]:
        answered = False
        try:
            if conn.sock is not None:
                conn.sock.settimeout(timeout_s)
            conn.request("POST", self.prefix + path, body=data, headers=self.headers)
            response = conn.getresponse()
            answered = True
            raw = response.read()
        except TimeoutError:
            conn.close()
            raise UpstreamTimeout(f"no answer within {timeout_s:g} s") from None
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
            conn.close()
            if not answered:
                raise _StaleConnection() from exc
            raise UpstreamUnreachable(f"{type(exc).__name__}: {exc}") from None
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise UpstreamUnreachable(f"{type(exc).__name__}: {exc}") from None
        if response.will_close:
            conn.close()
        else:
            self._give_back(conn)
        headers = {k.lower(): v for k, v in response.getheaders()}
        return decoded_answer(response.status, raw, headers)


def decoded_answer(status: int, raw: bytes, headers: dict[str, str]) -> dict[str, Any]:
    """The engine's JSON object; `UpstreamStatus` for an error status (with its headers, for
    Retry-After), `UpstreamBadAnswer` for a body that is no JSON object."""
    if status >= 400:
        raise UpstreamStatus(status, status_message(status, raw), headers)
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise UpstreamBadAnswer(f"the answer ({status}) is not a JSON object")
    return answer


class _StaleConnection(Exception):
    """A connection failed before any answer: the server closed it (reused), or refused."""


def _readable(sock: Any) -> bool:
    """Whether an idle connection's socket has something to read: the server closed it (EOF)
    or sent what nobody asked for; either way it cannot carry a request."""
    try:
        poller = select.poll()  # not select.select: it fails on descriptors over 1023
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


class AsyncJsonHttpClient:
    """`JsonHttpClient` for an event loop (asyncio streams): the gateway's REST routes call an
    engine from the loop itself, with no hop to a worker thread and back. Its connections
    belong to the loop that opened them: one client per loop (`OpenAIBackend.async_http`)."""

    def __init__(self, base_url: str, api_key: str | None) -> None:
        sync = JsonHttpClient(base_url, api_key)  # the same URL checks and headers
        self.host, self.port, self.prefix = sync.host, sync.port, sync.prefix
        self._head = "".join(f"{k}: {v}\r\n" for k, v in sync.headers.items())
        self._host_header = self.host if self.port == 80 else f"{self.host}:{self.port}"
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = []

    async def post(self, path: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        message = (
            f"POST {self.prefix}{path} HTTP/1.1\r\nHost: {self._host_header}\r\n{self._head}"
            f"Content-Length: {len(data)}\r\n\r\n"
        ).encode("latin-1") + data
        try:
            async with asyncio.timeout(timeout_s):
                conn = self._pooled()
                if conn is not None:
                    try:
                        return await self._exchange(conn, message)
                    except _StaleConnection:
                        pass  # closed by the server while idle: once more, afresh
                try:
                    conn = await asyncio.open_connection(self.host, self.port)
                except OSError as exc:
                    raise UpstreamUnreachable(f"{type(exc).__name__}: {exc}") from None
                try:
                    return await self._exchange(conn, message)
                except _StaleConnection as exc:
                    raise UpstreamUnreachable(str(exc.__cause__ or exc)) from None
        except TimeoutError:
            raise UpstreamTimeout(f"no answer within {timeout_s:g} s") from None

    def _pooled(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        now = time.monotonic()
        while self._idle:
            reader, writer, since = self._idle.pop()
            # EOF: the server closed it while it was idle (the loop saw it)
            if now - since > IDLE_S or reader.at_eof() or writer.is_closing():
                writer.close()
                continue
            return reader, writer
        return None

    async def _exchange(
        self, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], message: bytes
    ) -> dict[str, Any]:
        reader, writer = conn
        answered = False
        try:
            writer.write(message)
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                answered = True
                status, headers, keep = _parse_head(head)
                if status >= 200:
                    break  # (a 1xx interim answer is followed by the real one)
            raw = await _read_body(reader, headers, keep)
        except asyncio.IncompleteReadError as exc:
            writer.close()
            if not answered and not exc.partial:
                raise _StaleConnection() from exc
            raise UpstreamUnreachable("the connection closed before the answer ended") from None
        except (ConnectionResetError, BrokenPipeError) as exc:
            writer.close()
            if not answered:
                raise _StaleConnection() from exc
            raise UpstreamUnreachable(f"{type(exc).__name__}: {exc}") from None
        except (OSError, ValueError, asyncio.LimitOverrunError) as exc:
            writer.close()
            raise UpstreamUnreachable(f"{type(exc).__name__}: {exc}") from None
        except BaseException:  # a timeout or a cancellation mid-answer: the stream is spoilt
            writer.close()
            raise
        if keep and len(self._idle) < MAX_IDLE:
            self._idle.append((reader, writer, time.monotonic()))
        else:
            writer.close()
        return decoded_answer(status, raw, headers)

    def close(self) -> None:
        """Close the idle connections (from their loop's thread, or once it has stopped)."""
        idle, self._idle = self._idle, []
        for _, writer, _ in idle:
            with contextlib.suppress(Exception):
                writer.close()


def _parse_head(head: bytes) -> tuple[int, dict[str, str], bool]:
    """(status, headers with lower-case names, whether the connection stays open) of an
    answer's status line and headers."""
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    status_text = rest.partition(" ")[0]
    if not version.startswith("HTTP/1.") or not status_text.isdigit():
        raise ValueError(f"not an HTTP/1.x status line: {lines[0][:100]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            value = value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
    connection = headers.get("connection", "").lower()
    keep = "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
    return int(status_text), headers, keep


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str], keep: bool) -> bytes:
    """An answer's body: by Content-Length, chunked, or up to the end of the connection."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks = []
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
                return b"".join(chunks)
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
    length = headers.get("content-length")
    if length is not None:
        return await reader.readexactly(int(length))
    if keep:
        return b""  # neither length nor chunks on a kept connection: no body (204, 304)
    return await reader.read()
