"""The simulator's dm_env_rpc v1 server: worlds of N envs, stepped as one batch per request.

Protocol (dm_env_rpc v1, one bidirectional `Process` stream per connection):

* CreateWorld settings: `env` (a registered id, required), `num_envs` (default 1), `seed`,
  `num_workers` (worker processes that share the envs; 0 = step them in the server process),
  `max_episode_steps`, plus the env's own keyword arguments. Returns the world's name.
  At most `max_envs_per_world` envs (default MAX_ENVS_PER_WORLD) and `max_workers_per_world`
  worker processes (default MAX_WORKERS_PER_WORLD) per world; a world's cost (sizes, envs ×
  room cells, episode lengths) is bounded (`world.check_world_cost`); settings over these, or
  that name a missing directory or exhaust memory, are INVALID_ARGUMENT naming the setting.
  A connection creates at most `max_worlds_per_connection` worlds (default
  MAX_WORLDS_PER_CONNECTION); the server hosts at most `max_envs_total` envs (default
  MAX_ENVS_TOTAL) and `max_workers_total` worker processes (default MAX_WORKERS_TOTAL) across
  all connections; beyond any, CreateWorld is RESOURCE_EXHAUSTED naming the setting, the
  current use and the limit (destroy a world first, or ask the operator to raise it).
  At most `max_connections` streams are open at once (default MAX_CONNECTIONS); another one
  ends at once with gRPC status RESOURCE_EXHAUSTED naming max_connections. A session of the
  OpenEnv endpoints (`openenv_server.py`) counts as one connection holding one env.
* JoinWorld returns the specs. Every tensor has a leading dimension N = num_envs.
  Observations: the env's entries (text as STRING tensors, which carry no bounds), plus
  `reward` (FLOAT), `discount` (FLOAT) and `step_type` (INT64: 0 FIRST, 1 MID, 2 LAST).
  Privileged entries (e.g. `oracle_plan`) have uids above 1000 (`specs.PRIVILEGED_UID_BASE`).
  Actions: `action` (uid 1: INT64 with min/max for a Discrete env, FLOAT or DOUBLE of shape
  [N, *box.shape] with the box's bounds for a continuous (Box) env; a float action must come in
  the spec's dtype), `skill` (STRING, uid 2, skill envs only; "" means
  the env takes `action`), `active` (BOOL, uid 3, optional: envs set to False are not stepped
  and repeat their previous observation with reward 0; adapters use it to reset finished envs
  alone). Step returns only the requested observations.
* Auto-reset: the world's state is always RUNNING; episodes end per env. An env whose last
  step was LAST is reset by its next step, which ignores its action and returns FIRST with
  reward 0 and discount 1. The first Step after JoinWorld, Reset or ResetWorld resets every
  env and ignores all actions (dm_env_rpc's rule). Reset and ResetWorld accept a `seed`
  setting (env i then gets seed + i); CreateWorld's `seed` seeds each env's first episode.
* Worlds live as long as the connection that created them: when a client disconnects, its
  joined world is left and the worlds it created are destroyed, and their memory is handed
  back to the OS (`memory.release_memory`).
* A world belongs to the connection that created it. Its name (`world-` and 22 random URL-safe
  characters) cannot be guessed; JoinWorld, ResetWorld and DestroyWorld from any other
  connection get NOT_FOUND, the same answer as for a world that does not exist, and no error
  lists the server's worlds.

Bytes that do not parse as an EnvironmentRequest (corrupt wire format, a string that is not
UTF-8) end the stream with gRPC status INVALID_ARGUMENT (gRPC itself would say INTERNAL).
Bad input (unknown env id or setting, wrong action dtype/shape, an action out of bounds or not
finite, unknown skill, unknown uid, a destroyed world) gets a dm_env_rpc error whose message
names the field and what is allowed; the server goes on serving every other world and
connection.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, Protocol

import grpc
import numpy as np
from dm_env_rpc.v1 import dm_env_rpc_pb2, dm_env_rpc_pb2_grpc, tensor_utils
from google.protobuf.message import DecodeError
from google.rpc import status_pb2

from llmrl.common.auth import server_interceptors
from llmrl.common.logs import log_event
from llmrl.common.registry import UnavailableError
from llmrl.common.tls import add_grpc_port
from llmrl.simulator.actions import describe_action_space
from llmrl.simulator.memory import release_memory
from llmrl.simulator.specs import ACTION_UIDS, unpack_tensor, world_specs
from llmrl.simulator.world import World, WorldError

logger = logging.getLogger("llmrl.simulator.server")

_ACTION_NAMES = {uid: name for name, uid in ACTION_UIDS.items()}
_RESET_SETTINGS = ("seed",)
# Guards against requests that would exhaust the host (memory, processes); each is a setting
# of `llmrl serve simulator` (service.py), with these defaults sized for a small machine.
MAX_ENVS_PER_WORLD = 4096
# Issue 52: one stream took 2.1 GB with eight worlds of 4,096 envs; these bound a connection's
# worlds and the process's envs (SimpleDoorKey: about 60 MB per 1,000 envs).
MAX_WORLDS_PER_CONNECTION = 8
MAX_ENVS_TOTAL = 16384
# Worker processes (`num_workers`) are the costliest part of a world (about 70 MB each: eight
# worlds of 4 workers took 2.3 GB): bounded per world and across every connection.
MAX_WORKERS_PER_WORLD = 4
MAX_WORKERS_TOTAL = 8
# Concurrent client streams (connections); a refused one gets RESOURCE_EXHAUSTED naming it.
MAX_CONNECTIONS = 64
# gRPC's own limit on concurrent RPCs is set this far above max_connections, so that the
# servicer (not gRPC's unnamed "Concurrent RPC limit exceeded!") refuses an extra stream.
_REFUSAL_SLOTS = 4
# A world's name is "world-" and this many random bytes (URL-safe base64): it cannot be guessed.
WORLD_NAME_BYTES = 16
# Destroying at least this many envs at once is worth a gc pass and a malloc_trim.
RELEASE_AFTER_ENVS = 256


class RequestError(Exception):
    """A request the server refuses; becomes a dm_env_rpc error status."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Malformed:
    """Bytes that are no EnvironmentRequest (gRPC itself would answer INTERNAL)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _parse_request(data: bytes) -> dm_env_rpc_pb2.EnvironmentRequest | _Malformed:
    try:
        return dm_env_rpc_pb2.EnvironmentRequest.FromString(data)
    except DecodeError as exc:
        return _Malformed(str(exc))


class Metrics(Protocol):
    """What the server reports (service.py backs it with Prometheus)."""

    def world_count(self, count: int) -> None: ...
    def env_count(self, count: int) -> None: ...
    def env_steps(self, count: int) -> None: ...
    def error(self, request: str, field: str) -> None: ...


class _NoMetrics:
    def world_count(self, count: int) -> None:
        pass

    def env_count(self, count: int) -> None:
        pass

    def env_steps(self, count: int) -> None:
        pass

    def error(self, request: str, field: str) -> None:
        pass


@dataclass
class _WorldHandle:
    name: str
    world: World
    owner: int
    specs: dm_env_rpc_pb2.ActionObservationSpecs
    observation_names: dict[int, str]
    packers: dict[int, Any]
    lock: threading.Lock = field(default_factory=threading.Lock)
    joined_by: int | None = None
    pending_reset: bool = True
    pending_seed: int | None = None
    destroyed: bool = False


@dataclass
class _Session:
    """One client connection (one Process stream)."""

    id: int
    joined: _WorldHandle | None = None
    created: int = 0  # worlds this connection created and has not destroyed


def _unpack_settings(settings: Any) -> dict[str, Any]:
    values = {}
    for name, tensor in settings.items():
        try:
            value = unpack_tensor(tensor)
        except (ValueError, TypeError) as exc:
            raise WorldError(name, f"cannot read the setting's tensor: {exc}") from None
        values[name] = value.item() if isinstance(value, np.generic) else value
    return values


def _count(value: Any, default: int) -> int:
    """A count setting as a world will read it; a bad one (World refuses it, naming it, before
    it builds anything) counts as 0."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        return 0
    return int(value)


def _world_size(settings: dict[str, Any]) -> tuple[int, int]:
    """(envs, worker processes) a world with these CreateWorld settings will have (World
    starts min(num_workers, num_envs) workers)."""
    envs = _count(settings.get("num_envs"), 1)
    return envs, min(_count(settings.get("num_workers"), 0), envs)


def _setting_naming(settings: dict[str, Any], exc: OSError) -> str:
    """The setting whose value the OSError names (its path, or its message), else "settings"."""
    path, message = str(exc.filename or ""), str(exc)
    for name, value in settings.items():
        if isinstance(value, str) and value and (path.startswith(value) or value in message):
            return name
    return "settings"


class SimulatorServicer(dm_env_rpc_pb2_grpc.EnvironmentServicer):
    def __init__(
        self,
        metrics: Metrics | None = None,
        max_envs_per_world: int = MAX_ENVS_PER_WORLD,
        max_worlds_per_connection: int = MAX_WORLDS_PER_CONNECTION,
        max_envs_total: int = MAX_ENVS_TOTAL,
        max_workers_per_world: int = MAX_WORKERS_PER_WORLD,
        max_workers_total: int = MAX_WORKERS_TOTAL,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.metrics: Metrics = metrics or _NoMetrics()
        self.max_envs_per_world = max_envs_per_world
        self.max_worlds_per_connection = max_worlds_per_connection
        self.max_envs_total = max_envs_total
        self.max_workers_per_world = max_workers_per_world
        self.max_workers_total = max_workers_total
        self.max_connections = max_connections
        self._worlds: dict[str, _WorldHandle] = {}
        self._envs = 0  # envs of every hosted world, plus those of worlds being built
        self._workers = 0  # worker processes of every hosted world, and of worlds being built
        self._connections = 0  # open Process streams
        self._lock = threading.Lock()
        self._session_ids = itertools.count(1)

    # -- the stream ---------------------------------------------------------------------
    def Process(
        self,
        request_iterator: Iterator[dm_env_rpc_pb2.EnvironmentRequest | _Malformed],
        context: grpc.ServicerContext,
    ) -> Iterator[dm_env_rpc_pb2.EnvironmentResponse]:
        with self._lock:
            open_streams = self._connections
            if open_streams < self.max_connections:
                self._connections += 1
        if open_streams >= self.max_connections:
            self.metrics.error("connect", "max_connections")
            log_event(logger, "connection refused", connections=open_streams)
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"max_connections: this server serves {open_streams} connections (dm_env_rpc "
                f"streams and OpenEnv sessions), at most {self.max_connections}; close one, or "
                "have the operator raise the server's max_connections setting",
            )
        try:
            yield from self._serve(request_iterator, context)
        finally:
            with self._lock:
                self._connections -= 1

    def _serve(
        self,
        request_iterator: Iterator[dm_env_rpc_pb2.EnvironmentRequest | _Malformed],
        context: grpc.ServicerContext,
    ) -> Iterator[dm_env_rpc_pb2.EnvironmentResponse]:
        session = _Session(next(self._session_ids))
        handlers = {
            "create_world": self._create_world,
            "join_world": self._join_world,
            "step": self._step,
            "reset": self._reset,
            "reset_world": self._reset_world,
            "leave_world": self._leave_world,
            "destroy_world": self._destroy_world,
        }
        try:
            for request in request_iterator:
                if isinstance(request, _Malformed):  # the stream cannot be trusted further
                    self.metrics.error("malformed", "")
                    log_event(logger, "malformed request", error=request.reason)
                    context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"the message is not a dm_env_rpc v1 EnvironmentRequest: {request.reason}",
                    )
                kind = request.WhichOneof("payload")
                try:
                    handler = handlers.get(kind)  # type: ignore[arg-type]
                    if handler is None:
                        raise RequestError(
                            grpc.StatusCode.UNIMPLEMENTED,
                            f"request {kind!r} is not supported; requests: {', '.join(handlers)}",
                        )
                    response = dm_env_rpc_pb2.EnvironmentResponse()
                    if kind == "step":  # the hot path fills its response in place (no copy)
                        self._step(session, request.step, response.step)
                    else:
                        getattr(response, kind).CopyFrom(handler(session, getattr(request, kind)))
                except (WorldError, RequestError) as exc:
                    response = self._error_response(kind or "", exc)
                except Exception as exc:  # a bug or a broken env: report it, keep serving
                    logger.exception("request %s failed", kind)
                    response = self._error_response(
                        kind or "", RequestError(grpc.StatusCode.INTERNAL, f"{kind}: {exc!r}")
                    )
                yield response
        finally:
            self._disconnect(session)

    def _error_response(
        self, kind: str, exc: WorldError | RequestError
    ) -> dm_env_rpc_pb2.EnvironmentResponse:
        if isinstance(exc, WorldError):
            code, field_name = grpc.StatusCode.INVALID_ARGUMENT, exc.field
        else:
            code, field_name = exc.code, ""
        self.metrics.error(kind, field_name)
        log_event(logger, "request refused", request=kind, error=str(exc))
        return dm_env_rpc_pb2.EnvironmentResponse(
            error=status_pb2.Status(code=code.value[0], message=str(exc))
        )

    # -- worlds -------------------------------------------------------------------------
    def _create_world(
        self, session: _Session, request: dm_env_rpc_pb2.CreateWorldRequest
    ) -> dm_env_rpc_pb2.CreateWorldResponse:
        settings = _unpack_settings(request.settings)
        if "env" not in settings:
            raise WorldError("env", "required setting is missing (a registered env id)")
        env = settings.pop("env")
        if not isinstance(env, str):
            raise WorldError("env", f"expected a string env id, got {env!r}")
        limits = (
            ("num_envs", self.max_envs_per_world, "envs", "max_envs_per_world"),
            ("num_workers", self.max_workers_per_world, "worker processes",
             "max_workers_per_world"),
        )  # fmt: skip
        for name, limit, what, setting in limits:
            value = settings.get(name)
            if isinstance(value, int) and value > limit:
                raise WorldError(
                    name,
                    f"at most {limit} {what} per world on this server (its {setting} "
                    f"setting), got {value}",
                )
        envs, workers = _world_size(settings)
        self._reserve(session, envs, workers)
        try:
            world = self.build_world(env, settings)
        except BaseException:
            self._unreserve(session, envs, workers)
            raise
        specs = world_specs(
            world.observation_space,
            world.action_space,
            world.has_skills,
            world.num_envs,
            world.privileged_observations,
        )
        name = f"world-{secrets.token_urlsafe(WORLD_NAME_BYTES)}"  # unguessable
        handle = _WorldHandle(
            name=name,
            world=world,
            owner=session.id,
            specs=specs,
            observation_names={uid: spec.name for uid, spec in specs.observations.items()},
            packers={
                uid: tensor_utils.get_packer(tensor_utils.data_type_to_np_type(spec.dtype))
                for uid, spec in specs.observations.items()
            },
        )
        with self._lock:
            self._worlds[name] = handle
            self.metrics.world_count(len(self._worlds))
        log_event(logger, "world created", world=name, env=env, num_envs=world.num_envs)
        return dm_env_rpc_pb2.CreateWorldResponse(world_name=name)

    def _reserve(self, session: _Session, envs: int, workers: int) -> None:
        """Count a world about to be built against the connection's and the server's limits
        (before building it, so that concurrent streams cannot overshoot)."""
        if session.created >= self.max_worlds_per_connection:
            raise RequestError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"max_worlds_per_connection: this connection already created "
                f"{session.created} worlds, at most {self.max_worlds_per_connection} per "
                "connection on this server; destroy one of them (DestroyWorld) first, or have "
                "the operator raise the server's max_worlds_per_connection setting",
            )
        with self._lock:
            if self._envs + envs > self.max_envs_total:
                raise RequestError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"max_envs_total: this server hosts {self._envs} envs; {envs} more would "
                    f"pass its limit of {self.max_envs_total}; destroy worlds (DestroyWorld) "
                    "or ask for fewer envs (num_envs), or have the operator raise the "
                    "server's max_envs_total setting",
                )
            if self._workers + workers > self.max_workers_total:
                raise RequestError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"max_workers_total: this server runs {self._workers} worker processes "
                    f"for its worlds; {workers} more would pass its limit of "
                    f"{self.max_workers_total}; destroy worlds (DestroyWorld) or ask for fewer "
                    "workers (num_workers; 0 steps the envs in the server process), or have "
                    "the operator raise the server's max_workers_total setting",
                )
            self._envs += envs
            self._workers += workers
            self.metrics.env_count(self._envs)
        session.created += 1

    def open_session(self, envs: int = 1) -> str | None:
        """Count an OpenEnv session (`openenv_server`) against the same caps as the streams and
        worlds: one connection (`max_connections`) holding `envs` envs (`max_envs_total`).
        Returns None when counted, else the refusal naming the setting, the current use and
        the limit (nothing counted). `close_session` gives the counts back."""
        with self._lock:
            if self._connections >= self.max_connections:
                return (
                    f"max_connections: this server serves {self._connections} connections "
                    f"(dm_env_rpc streams and OpenEnv sessions), at most {self.max_connections}; "
                    "close one, or have the operator raise the server's max_connections setting"
                )
            if self._envs + envs > self.max_envs_total:
                return (
                    f"max_envs_total: this server hosts {self._envs} envs; {envs} more would "
                    f"pass its limit of {self.max_envs_total}; close a session or destroy a "
                    "world, or have the operator raise the server's max_envs_total setting"
                )
            self._connections += 1
            self._envs += envs
            self.metrics.env_count(self._envs)
        return None

    def close_session(self, envs: int = 1) -> None:
        with self._lock:
            self._connections -= 1
            self._envs -= envs
            self.metrics.env_count(self._envs)

    def _unreserve(self, session: _Session | None, envs: int, workers: int) -> None:
        with self._lock:
            self._envs -= envs
            self._workers -= workers
            self.metrics.env_count(self._envs)
        if session is not None:
            session.created -= 1

    def build_world(self, env: str, settings: dict[str, Any]) -> World:
        """A World of `env` with `settings`; what it refuses becomes a WorldError naming the
        setting (or a RequestError: the env's optional package is missing here)."""
        try:
            return World(env, **settings)
        except WorldError:
            raise
        except (ValueError, TypeError) as exc:  # the env's constructor refused a setting
            raise WorldError("settings", f"env {env!r} refused its settings: {exc}") from None
        except UnavailableError as exc:  # registered, but its optional package is missing here
            raise RequestError(grpc.StatusCode.FAILED_PRECONDITION, f"env: {exc}") from None
        except MemoryError:
            raise WorldError(
                "settings",
                f"env {env!r}: a world with these settings needs more memory than "
                "this server has; use fewer envs (num_envs) or smaller settings",
            ) from None
        except OSError as exc:  # a setting names a missing or unreadable file or directory
            raise WorldError(_setting_naming(settings, exc), f"env {env!r}: {exc}") from None

    def _find_world(self, session: _Session, name: str) -> _WorldHandle:
        """The world `name` when this connection created it. Another connection's world gets
        the same NOT_FOUND as a world that does not exist, and no other world is named."""
        with self._lock:
            handle = self._worlds.get(name)
        if handle is None or handle.owner != session.id:
            raise RequestError(
                grpc.StatusCode.NOT_FOUND,
                f"world_name: no world {name!r} among this connection's worlds (a world "
                "belongs to the connection that created it: CreateWorld returns its name)",
            )
        return handle

    def _destroy_world(
        self, session: _Session, request: dm_env_rpc_pb2.DestroyWorldRequest
    ) -> dm_env_rpc_pb2.DestroyWorldResponse:
        handle = self._find_world(session, request.world_name)
        if self._destroy(handle, session) >= RELEASE_AFTER_ENVS:
            release_memory()
        return dm_env_rpc_pb2.DestroyWorldResponse()

    def _destroy(self, handle: _WorldHandle, session: _Session | None = None) -> int:
        """Destroy a world (its owner's count goes down when `session` owns it); returns the
        envs freed (0 when another call destroyed it first)."""
        with self._lock:
            if self._worlds.pop(handle.name, None) is None:
                return 0
            self.metrics.world_count(len(self._worlds))
        with handle.lock:
            handle.destroyed = True
            envs, workers = handle.world.num_envs, handle.world.num_workers
            handle.world.close()  # drops its envs too: a lingering handle holds no memory
        owner = session if session is not None and session.id == handle.owner else None
        self._unreserve(owner, envs, workers)
        log_event(logger, "world destroyed", world=handle.name)
        return envs

    def _reset_world(
        self, session: _Session, request: dm_env_rpc_pb2.ResetWorldRequest
    ) -> dm_env_rpc_pb2.ResetWorldResponse:
        handle = self._find_world(session, request.world_name)
        seed = self._reset_seed(request.settings)
        with handle.lock:
            handle.pending_reset, handle.pending_seed = True, seed
        return dm_env_rpc_pb2.ResetWorldResponse()

    def destroy_all(self) -> None:
        with self._lock:
            handles = list(self._worlds.values())
        for handle in handles:
            self._destroy(handle)

    @property
    def world_count(self) -> int:
        with self._lock:
            return len(self._worlds)

    @property
    def env_count(self) -> int:
        """Envs of the hosted worlds (and of worlds being built)."""
        with self._lock:
            return self._envs

    @property
    def worker_count(self) -> int:
        """Worker processes of the hosted worlds (and of worlds being built)."""
        with self._lock:
            return self._workers

    @property
    def connection_count(self) -> int:
        """Open client streams."""
        with self._lock:
            return self._connections

    # -- a connection's world -----------------------------------------------------------
    def _join_world(
        self, session: _Session, request: dm_env_rpc_pb2.JoinWorldRequest
    ) -> dm_env_rpc_pb2.JoinWorldResponse:
        if session.joined is not None and session.joined.destroyed:
            session.joined = None  # its world is gone: nothing left to leave
        if session.joined is not None:
            raise RequestError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"world_name: this connection already joined {session.joined.name!r}; "
                "leave it first",
            )
        for name in request.settings:
            raise WorldError(name, "unknown JoinWorld setting; JoinWorld takes no settings")
        handle = self._find_world(session, request.world_name)
        with handle.lock:
            if handle.joined_by is not None:
                raise RequestError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"world_name: world {handle.name!r} is joined by another connection",
                )
            handle.joined_by = session.id
            handle.pending_reset, handle.pending_seed = True, None
        session.joined = handle
        return dm_env_rpc_pb2.JoinWorldResponse(specs=handle.specs)

    def _leave_world(
        self, session: _Session, request: dm_env_rpc_pb2.LeaveWorldRequest
    ) -> dm_env_rpc_pb2.LeaveWorldResponse:
        handle, session.joined = session.joined, None
        if handle is not None:
            with handle.lock:
                if handle.joined_by == session.id:
                    handle.joined_by = None
        return dm_env_rpc_pb2.LeaveWorldResponse()

    def _joined(self, session: _Session) -> _WorldHandle:
        handle = session.joined
        if handle is None:
            raise RequestError(
                grpc.StatusCode.FAILED_PRECONDITION,
                "this connection has not joined a world; send JoinWorld first",
            )
        if handle.destroyed:
            raise RequestError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"world_name: world {handle.name!r} was destroyed; create and join a new world",
            )
        return handle

    def _reset_seed(self, settings: Any) -> int | None:
        values = _unpack_settings(settings)
        for name in values:
            if name not in _RESET_SETTINGS:
                raise WorldError(
                    name, f"unknown reset setting; settings: {', '.join(_RESET_SETTINGS)}"
                )
        seed = values.get("seed")
        if seed is not None and (not isinstance(seed, int) or seed < 0):
            raise WorldError("seed", f"expected an integer >= 0, got {seed!r}")
        return seed

    def _reset(
        self, session: _Session, request: dm_env_rpc_pb2.ResetRequest
    ) -> dm_env_rpc_pb2.ResetResponse:
        handle = self._joined(session)
        seed = self._reset_seed(request.settings)
        with handle.lock:
            handle.pending_reset, handle.pending_seed = True, seed
        return dm_env_rpc_pb2.ResetResponse(specs=handle.specs)

    def _step(
        self,
        session: _Session,
        request: dm_env_rpc_pb2.StepRequest,
        response: dm_env_rpc_pb2.StepResponse,
    ) -> None:
        handle = self._joined(session)
        names = handle.observation_names
        uids = list(dict.fromkeys(request.requested_observations))
        for uid in uids:
            if uid not in names:
                raise WorldError(
                    "requested_observations",
                    f"unknown observation uid {uid}; uids: "
                    + ", ".join(f"{u} ({n})" for u, n in names.items()),
                )
        requested = [names[uid] for uid in uids]
        with handle.lock:
            if handle.destroyed:
                raise RequestError(
                    grpc.StatusCode.FAILED_PRECONDITION, f"world {handle.name!r} was destroyed"
                )
            world = handle.world
            if handle.pending_reset:  # the first step of a sequence ignores its actions
                result = world.reset(seed=handle.pending_seed, observations=requested)
                handle.pending_reset, handle.pending_seed = False, None
            else:
                actions = self._unpack_actions(handle, request.actions)
                result = world.step(observations=requested, **actions)
        self.metrics.env_steps(world.num_envs)
        response.state = dm_env_rpc_pb2.EnvironmentStateType.RUNNING
        observations = response.observations
        for uid, name in zip(uids, requested, strict=True):
            array = result[name]
            tensor = observations[uid]
            tensor.shape.extend(array.shape)
            handle.packers[uid].pack(tensor, array)

    def _unpack_actions(self, handle: _WorldHandle, actions: Any) -> dict[str, Any]:
        specs = handle.specs.actions
        unpacked: dict[str, Any] = {}
        for uid, tensor in actions.items():
            if uid not in specs:
                raise WorldError(
                    "actions",
                    f"unknown action uid {uid}; uids: "
                    + ", ".join(f"{u} ({s.name})" for u, s in specs.items()),
                )
            name = _ACTION_NAMES[uid]
            try:
                value = unpack_tensor(tensor)
            except (ValueError, TypeError) as exc:
                raise WorldError(name, f"cannot read the tensor: {exc}") from None
            expected = np.dtype(tensor_utils.data_type_to_np_type(specs[uid].dtype))
            if expected.kind == "f" and value.dtype.kind == "f" and value.dtype != expected:
                # dm_env_rpc: a float tensor comes in its spec's precision (other dtypes are
                # the world's to refuse, with the same message as in-process)
                allowed = describe_action_space(handle.world.action_space)
                raise WorldError(
                    name, f"expected dtype {expected.name} ({allowed}), got dtype {value.dtype}"
                )
            unpacked[name] = value
        return unpacked

    def _disconnect(self, session: _Session) -> None:
        """A client went away: leave its world and destroy the worlds it created."""
        self._leave_world(session, dm_env_rpc_pb2.LeaveWorldRequest())
        with self._lock:
            owned = [h for h in self._worlds.values() if h.owner == session.id]
        freed = sum(self._destroy(handle, session) for handle in owned)
        del owned  # the last references to the worlds, before the memory is handed back
        if freed >= RELEASE_AFTER_ENVS:
            release_memory()


def _add_servicer(servicer: SimulatorServicer, server: grpc.Server) -> None:
    """`dm_env_rpc_pb2_grpc.add_EnvironmentServicer_to_server`, but bytes that do not parse
    reach `Process` (as `_Malformed`), which ends the stream with INVALID_ARGUMENT."""
    handlers = {
        "Process": grpc.stream_stream_rpc_method_handler(
            servicer.Process,
            request_deserializer=_parse_request,
            response_serializer=dm_env_rpc_pb2.EnvironmentResponse.SerializeToString,
        )
    }
    service = "dm_env_rpc.v1.Environment"
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_registered_method_handlers(service, handlers)


def create_server(
    host: str,
    port: int,
    servicer: SimulatorServicer,
    max_connections: int | None = None,
    token: str | None = None,
) -> tuple[grpc.Server, int]:
    """A started gRPC server for `servicer`; returns it and the bound port (port 0: any).
    `max_connections` (default: the servicer's) bounds the concurrent client streams.
    With a `token`, every call must carry it as `authorization: Bearer <token>` metadata."""
    if max_connections is not None:
        servicer.max_connections = max_connections
    # a stream holds a thread while it lasts; the few spare ones answer refused streams
    threads = servicer.max_connections + _REFUSAL_SLOTS
    options = [
        ("grpc.max_send_message_length", -1),
        ("grpc.max_receive_message_length", -1),
        ("grpc.so_reuseport", 0),
    ]
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="sim-rpc"),
        options=options,
        maximum_concurrent_rpcs=threads,
        interceptors=server_interceptors(token),
    )
    _add_servicer(servicer, server)
    try:
        bound = add_grpc_port(server, f"{host}:{port}")  # TLS when configured
    except RuntimeError:
        bound = 0
    if bound == 0:
        raise OSError(f"cannot bind the simulator's gRPC port {host}:{port} (in use?)")
    server.start()
    return server, bound
