"""Every registered env over OpenEnv's protocol, on the simulator's HTTP port, beside dm_env_rpc.

LLM-RL trainers (TRL's `environment_factory`, SkyRL, NeMo Gym, verifiers) reach environments
through OpenEnv (`openenv-core`): a WebSocket session at `<base_url>/ws` plus HTTP `/reset`,
`/step`, `/state`, `/schema`, `/health` and `/metadata`. Each registered env has its own base
URL, `http://HOST:PORT/openenv/<env>` (`GET /openenv` lists them), so that OpenEnv's own
`GenericEnvClient(base_url)`, which appends `/ws`, works unchanged.

Why not openenv-core's `HTTPEnvServer`: openenv-core is a test extra only, and brings gradio,
MCP and container tooling a simulator does not need; its server serves one env class per app,
has its own session cap (not the simulator's `max_connections`/`max_envs_total`) and no bearer
token. So the protocol is implemented here on FastAPI/uvicorn (already the services' runtime),
wire-compatible with openenv-core 0.3.0 (`core/env_server/http_server.py`, `types.py`):

* WebSocket `/openenv/<env>/ws`, JSON text messages, one answer each:
  `{"type": "reset", "data": {...}}` and `{"type": "step", "data": <action>}` answer
  `{"type": "observation", "data": {"observation": {...}, "reward": r, "done": d}}`;
  `{"type": "state"}` answers `{"type": "state", "data": {"episode_id", "step_count", ...}}`;
  `{"type": "close"}` ends the session; anything wrong answers
  `{"type": "error", "data": {"message", "code", "field"}}` (codes as OpenEnv's `WSErrorCode`)
  and the session goes on.
* Reset data: `seed` (int >= 0: the same seed gives the same observations), `episode_id`, and
  the env's own settings (e.g. CrafterText `length`, `max_episode_steps`): a session builds its
  env at its first reset and rebuilds it when a reset names other settings. `data_dir` (a path:
  the server reads only the data its operator configured) and world settings (`num_envs`,
  `num_workers`) are refused, naming the field.
* Action: `{"action": <int or list of floats>}` (the env's action space, see `/schema`) or
  `{"phrase": "<text>"}`, one of the observation's `action_phrases`.
* Observation: the env's entries (text as strings, arrays as nested lists), `truncated` and,
  for text envs, `action_phrases`: the legal text actions (BabyAI-Text's six phrases,
  Housekeep's feasible skills, Crafter's action names). Privileged entries (`oracle_plan`,
  `correct_receptacles`...) are never sent. `/schema` gives the JSON schemas of the action,
  the observation and the state, built from the env's gymnasium spaces.
* HTTP `/reset` and `/step` are stateless, as in OpenEnv: each builds an env for the request
  (`/step` resets it with the body's `seed` and settings, then takes the one action); episodes
  are played over `/ws`.

Caps: a session (and an HTTP request while it runs) counts as one connection holding one env
against the simulator's `max_connections` and `max_envs_total`, shared with dm_env_rpc streams
and worlds; beyond either, the session is refused (code CAPACITY_REACHED) naming the setting,
the current use and the limit. A session is freed when its WebSocket closes. Envs are reset and
stepped on a thread pool, never on the event loop, so that many sessions step at once.

Auth: the app is behind `llmrl.common.auth`'s bearer check like every other endpoint (only
`/health` is open); a WebSocket without the token is refused at the handshake (HTTP 403).
OpenEnv's client sends no headers: docs/operations/openenv.md shows the subclass that adds it.
WebSocket sessions need a WebSocket library for uvicorn (`websockets` or `wsproto`); without
one the HTTP endpoints still work and the simulator logs that sessions are unavailable.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from fastapi import WebSocket  # at module level: FastAPI resolves the routes' annotations here
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, model_validator

from llmrl.common.http import field_of
from llmrl.common.json_limits import JsonLimitError, check_json_body
from llmrl.common.logs import log_event
from llmrl.common.registry import registry
from llmrl.simulator.actions import describe_action_space
from llmrl.simulator.errors import WorldError
from llmrl.simulator.server import RequestError, SimulatorServicer
from llmrl.simulator.world import MAKE_SETTINGS, STEP_ENTRIES, StepType, World, env_ids

logger = logging.getLogger("llmrl.simulator.openenv")

PREFIX = "/openenv"
# Reset keys that are the session's, not the env's.
SESSION_KEYS: tuple[str, ...] = ("seed", "episode_id")
# Settings a request may not give over OpenEnv, and why (the error says it).
REFUSED_SETTINGS: dict[str, str] = {
    "data_dir": "a path: the server reads only the data its operator configured "
    "(e.g. LLMRL_HOUSEKEEP_DATA); ask for a `scene`, `split` or `episode` instead",
    "render_mode": "sessions send observations, not renderings",
    "num_envs": "a session holds one env; open more sessions for more envs",
    "num_workers": "a session's env is stepped in the server process",
}
# Entries whose text lists an env's legal text actions, one per line (first found wins).
PHRASE_ENTRIES: tuple[str, ...] = ("action_phrases", "feasible_skills")
# A refused WebSocket is held this long for the client's first message, which is answered
# with the refusal: closing at once could lose the message (the client may still be sending).
REFUSAL_WAIT_S = 10.0
MAX_PHRASE_CHARS = 1000
# WebSocket close codes: policy violation (unknown env), try again later (capacity).
CLOSE_UNKNOWN, CLOSE_CAPACITY = 1008, 1013
CLOSE_IDLE = 1001  # going away: the server ends a session that sent nothing for openenv_idle_s


class OpenEnvError(Exception):
    """Bad input or a refusal: the message names the field; `code` is OpenEnv's WSErrorCode,
    `status` the HTTP status of the same refusal."""

    def __init__(
        self, field: str, message: str, code: str = "VALIDATION_ERROR", status: int = 422
    ) -> None:
        super().__init__(message if message.startswith(f"{field}: ") else f"{field}: {message}")
        self.field, self.code, self.status = field, code, status


# -- request bodies (pydantic: validated before anything is built) -----------------------
class ResetBody(BaseModel):
    """POST /reset and WebSocket reset data: the seed, an episode id, the env's settings."""

    model_config = ConfigDict(extra="allow")  # the extra keys are the env's settings

    seed: StrictInt | None = Field(default=None, ge=0, le=2**63 - 1)
    episode_id: str | None = Field(default=None, max_length=255)

    def settings(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class ActionBody(BaseModel):
    """An action: exactly one of `action` (the env's action space) and `phrase`."""

    model_config = ConfigDict(extra="forbid")

    action: StrictInt | list[Any] | None = None
    phrase: str | None = Field(default=None, max_length=MAX_PHRASE_CHARS)
    metadata: dict[str, Any] = Field(default_factory=dict)  # OpenEnv's Action has it; unused

    @model_validator(mode="after")
    def _one_of(self) -> ActionBody:
        if (self.action is None) == (self.phrase is None):
            raise ValueError("give exactly one of `action` and `phrase`")
        return self


class StepBody(BaseModel):
    """POST /step (stateless): the action, and the episode it is taken in (seed, settings)."""

    model_config = ConfigDict(extra="allow")  # the extra keys are the env's settings

    action: dict[str, Any]
    seed: StrictInt | None = Field(default=None, ge=0, le=2**63 - 1)
    timeout_s: float | None = Field(default=None, gt=0)  # OpenEnv's; steps are not cut short
    request_id: str | None = Field(default=None, max_length=255)


class _WsMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["reset", "step", "state", "close"]
    data: dict[str, Any] = Field(default_factory=dict)


MESSAGE_TYPES = ("reset", "step", "state", "close")


def _validation_message(exc: ValidationError, root: str, allowed: str) -> OpenEnvError:
    """The first pydantic error as `field: what is wrong; allowed`."""
    error = exc.errors()[0]
    field = field_of([root, *error["loc"]]) if error["loc"] else root
    message = str(error.get("msg", "invalid")).replace("Value error, ", "")
    return OpenEnvError(field, f"{message}; {allowed}")


# -- what an env offers over OpenEnv ---------------------------------------------------------
@dataclass(frozen=True)
class EnvInfo:
    env: str
    entries: tuple[str, ...]  # observation entries sent (no privileged ones)
    phrase_entry: str | None  # the entry listing the legal phrases, if any
    static_phrases: tuple[str, ...]  # the action names of a non-skill text env (Crafter)
    has_skills: bool
    action_space: Any
    observation_space: spaces.Dict

    @classmethod
    def of(cls, env: str, world: World) -> EnvInfo:
        entries = tuple(n for n in world.default_observations if n not in STEP_ENTRIES)
        names = world.observation_space.spaces
        phrase_entry = next((n for n in PHRASE_ENTRIES if n in names), None)
        static: tuple[str, ...] = ()
        if not world.has_skills:  # a discrete env whose actions have names (CrafterText)
            static = tuple(getattr(registry.entry("env", env).obj, "action_names", ()) or ())
        return cls(
            env,
            entries,
            phrase_entry,
            static,
            world.has_skills,
            world.action_space,
            world.observation_space,
        )

    @property
    def takes_phrases(self) -> bool:
        return (self.has_skills and self.phrase_entry is not None) or bool(self.static_phrases)

    def requested(self) -> list[str]:
        extra = [self.phrase_entry] if self.phrase_entry and self.has_skills else []
        return [*self.entries, *extra, *STEP_ENTRIES]

    def describe_action(self) -> str:
        what = f"an action is {{'action': {describe_action_space(self.action_space)}}}"
        if self.takes_phrases:
            what += " or {'phrase': one of the observation's action_phrases}"
        return what


def session_settings(env: str) -> list[str]:
    """The settings a reset may give for `env`: its constructor's keywords and gymnasium's."""
    entry = registry.entry("env", env)
    names = set(entry.metadata.get("kwargs", {})) | set(MAKE_SETTINGS)
    try:
        parameters = inspect.signature(entry.obj).parameters.values()
    except (TypeError, ValueError):
        parameters = []  # type: ignore[assignment]
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    names |= {p.name for p in parameters if p.kind in keyword}
    return sorted(names - set(REFUSED_SETTINGS))


def check_settings(env: str, settings: dict[str, Any]) -> None:
    """Refuse, naming it, a setting that OpenEnv sessions may not give or `env` does not take."""
    allowed = session_settings(env)
    for name in settings:
        if name in REFUSED_SETTINGS:
            raise OpenEnvError(name, f"not accepted over OpenEnv: {REFUSED_SETTINGS[name]}")
        if name not in allowed:
            raise OpenEnvError(
                name,
                f"unknown reset setting for env {env!r}; settings: "
                f"{', '.join([*SESSION_KEYS, *allowed])}",
            )


def _jsonable(value: Any) -> Any:
    """One env's entry as JSON: text as a string, numbers as numbers, arrays as nested lists
    (a non-finite float, which JSON cannot carry, as null)."""
    if isinstance(value, str | np.str_):
        return str(value)
    array = np.asarray(value)
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        array = np.where(np.isfinite(array), array, None)
    return array.tolist() if array.ndim else array.item()


def space_schema(space: spaces.Space) -> dict[str, Any]:
    """The JSON schema of one value of a gymnasium space, bounds included where uniform."""
    if isinstance(space, spaces.Text):
        return {"type": "string", "maxLength": int(space.max_length)}
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        return {"type": "integer", "minimum": start, "maximum": start + int(space.n) - 1}
    if isinstance(space, spaces.MultiBinary | spaces.Box | spaces.MultiDiscrete):
        dtype = np.dtype(space.dtype)
        item: dict[str, Any] = {"type": "integer" if dtype.kind in "iub" else "number"}
        if isinstance(space, spaces.MultiBinary):
            low, high = np.zeros(1), np.ones(1)
        elif isinstance(space, spaces.MultiDiscrete):
            low, high = np.zeros(1), np.asarray(space.nvec) - 1
        else:
            low, high = np.asarray(space.low), np.asarray(space.high)
        for key, bound in (("minimum", low.ravel()), ("maximum", high.ravel())):
            if bound.size and (bound == bound[0]).all() and np.isfinite(bound[0]):
                item[key] = bound[0].item()
        for size in reversed(space.shape):
            item = {"type": "array", "items": item, "minItems": size, "maxItems": size}
        return item
    return {}


def env_schemas(info: EnvInfo) -> dict[str, Any]:
    """`/schema`: the action, observation and state schemas (OpenEnv's SchemaResponse)."""
    action: dict[str, Any] = {
        "title": f"{info.env} action",
        "description": f"exactly one of `action` and `phrase`: {info.describe_action()}",
        "type": "object",
        "properties": {"action": space_schema(info.action_space)},
        "additionalProperties": False,
    }
    if info.takes_phrases:
        phrase: dict[str, Any] = {
            "type": "string",
            "description": "one of the observation's action_phrases",
        }
        if info.static_phrases:
            phrase["enum"] = list(info.static_phrases)
        action["properties"]["phrase"] = phrase
    action["properties"]["metadata"] = {"type": "object"}
    spaces_ = info.observation_space.spaces
    properties = {name: space_schema(spaces_[name]) for name in info.entries}
    properties["truncated"] = {
        "type": "boolean",
        "description": "the episode ended on its step limit (done, not terminated)",
    }
    if info.takes_phrases:
        properties["action_phrases"] = {
            "type": "array",
            "items": {"type": "string"},
            "description": "the legal text actions now (send one as `phrase`)",
        }
    properties["done"] = {"type": "boolean"}
    properties["reward"] = {"type": ["number", "null"]}
    observation = {
        "title": f"{info.env} observation",
        "type": "object",
        "properties": properties,
    }
    state = {
        "title": f"{info.env} state",
        "type": "object",
        "properties": {
            "episode_id": {"type": ["string", "null"]},
            "step_count": {"type": "integer", "minimum": 0},
            "env": {"type": "string"},
            "seed": {"type": ["integer", "null"]},
            "settings": {"type": "object"},
        },
    }
    return {"action": action, "observation": observation, "state": state}


# -- one session: one env, driven from a worker thread --------------------------------------
class EnvSession:
    """One env of one OpenEnv session. Its methods block (they build and step the env): the
    app calls them on its thread pool, one at a time per session."""

    def __init__(self, env: str, build: Callable[[str, dict[str, Any]], World]) -> None:
        self.env = env
        self._build = build
        self.world: World | None = None
        self.info: EnvInfo | None = None
        self.settings: dict[str, Any] = {}
        self.episode_id: str | None = None
        self.seed: int | None = None
        self.step_count = 0
        self.done = False

    def reset(self, data: dict[str, Any]) -> dict[str, Any]:
        try:
            body = ResetBody.model_validate(data)
        except ValidationError as exc:
            raise _validation_message(exc, "data", "reset takes seed (integer >= 0), "
                                      "episode_id and the env's settings") from None  # fmt: skip
        settings = body.settings()
        check_settings(self.env, settings)
        if self.world is None or settings != self.settings:
            self.close()
            world = self._build(self.env, settings)
            self.world, self.settings, self.info = world, settings, EnvInfo.of(self.env, world)
        assert self.info is not None
        result = self.world.reset(seed=body.seed, observations=self.info.requested())
        self.episode_id = body.episode_id or secrets.token_hex(8)
        self.seed, self.step_count, self.done = body.seed, 0, False
        return self._payload(result)

    def step(self, data: dict[str, Any]) -> dict[str, Any]:
        if self.world is None or self.info is None:
            raise OpenEnvError("type", "no episode yet in this session: send a reset first")
        if self.done:
            raise OpenEnvError("type", "the episode is over (done): send a reset to start another")
        info = self.info
        try:
            body = ActionBody.model_validate(data)
        except ValidationError as exc:
            raise _validation_message(exc, "action", info.describe_action()) from None
        action, skill = None, None
        if body.phrase is not None:
            if info.has_skills and info.phrase_entry is not None:
                skill = np.array([body.phrase])
            elif body.phrase in info.static_phrases:
                action = np.array([info.static_phrases.index(body.phrase)])
            elif info.static_phrases:
                raise OpenEnvError(
                    "phrase", f"unknown phrase {body.phrase!r}; phrases: "
                    + ", ".join(info.static_phrases)
                )  # fmt: skip
            else:
                raise OpenEnvError("phrase", f"env {self.env!r} takes no phrases; "
                                   + info.describe_action())  # fmt: skip
        else:
            action = self._action_array(body.action)
        try:
            result = self.world.step(action, skill, observations=info.requested())
        except WorldError as exc:  # the world's check, renamed to this protocol's fields
            field = "phrase" if exc.field.startswith("skill") else "action"
            raise OpenEnvError(field, str(exc).split(": ", 1)[1]) from None
        self.step_count += 1
        payload = self._payload(result)
        self.done = payload["done"]
        return payload

    def _action_array(self, action: Any) -> np.ndarray:
        assert self.info is not None
        if isinstance(self.info.action_space, spaces.Discrete):
            return np.array([action])
        try:  # a Box: nested lists of numbers, as float64 (the world casts to the box's dtype)
            array = np.asarray(action, dtype=np.float64)
        except (TypeError, ValueError):
            raise OpenEnvError(
                "action", f"expected numbers; {describe_action_space(self.info.action_space)}"
            ) from None
        return array[None]

    def _payload(self, result: dict[str, np.ndarray]) -> dict[str, Any]:
        assert self.info is not None
        info = self.info
        observation = {name: _jsonable(result[name][0]) for name in info.entries}
        if info.has_skills and info.phrase_entry is not None:
            text = str(result[info.phrase_entry][0])
            observation["action_phrases"] = [line for line in text.split("\n") if line]
        elif info.static_phrases:
            observation["action_phrases"] = list(info.static_phrases)
        done = int(result["step_type"][0]) == StepType.LAST
        observation["truncated"] = bool(done and float(result["discount"][0]) == 1.0)
        reward = float(result["reward"][0])
        return {"observation": observation, "reward": reward, "done": bool(done)}

    def state(self) -> dict[str, Any]:
        return {
            "episode_id": self.episode_id,
            "step_count": self.step_count,
            "env": self.env,
            "seed": self.seed,
            "settings": self.settings,
        }

    def close(self) -> None:
        if self.world is not None:
            self.world.close()
            self.world = None


# -- the app ---------------------------------------------------------------------------------
def _error_data(exc: OpenEnvError) -> dict[str, Any]:
    return {"message": str(exc), "code": exc.code, "field": exc.field}


class OpenEnvEndpoints:
    """The OpenEnv routes of a simulator: sessions counted by `servicer`, envs built with its
    `build_world` (so a world's cost bounds apply), stepped on a pool of threads."""

    def __init__(self, servicer: SimulatorServicer, idle_s: float) -> None:
        self.servicer = servicer
        self.idle_s = idle_s
        # a session holds at most one thread at a time, and sessions are capped by
        # max_connections: this many threads step them all at once
        self.executor = ThreadPoolExecutor(
            max_workers=servicer.max_connections + 4, thread_name_prefix="openenv"
        )
        self._schemas: dict[str, dict[str, Any]] = {}
        self._sessions: set[EnvSession] = set()
        self._lock = threading.Lock()

    @property
    def session_count(self) -> int:
        with self._lock:
            return len(self._sessions)

    def _build(self, env: str, settings: dict[str, Any]) -> World:
        try:
            return self.servicer.build_world(env, {**settings, "num_envs": 1})
        except WorldError as exc:
            raise OpenEnvError(exc.field, str(exc).split(": ", 1)[1]) from None
        except RequestError as exc:  # the env's optional package is not installed here
            raise OpenEnvError("env", str(exc), "EXECUTION_ERROR", 503) from None

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args))

    def _check_env(self, env: str) -> None:
        if env not in env_ids():
            raise OpenEnvError(
                "env", f"unknown env {env!r}; envs: {', '.join(env_ids())}", "VALIDATION_ERROR", 404
            )

    def _open(self, session: EnvSession | None = None) -> None:
        refusal = self.servicer.open_session()
        if refusal is not None:
            self.servicer.metrics.error("openenv", refusal.split(":", 1)[0])
            field = refusal.split(":", 1)[0]
            raise OpenEnvError(field, refusal, "CAPACITY_REACHED", 429)
        if session is not None:
            with self._lock:
                self._sessions.add(session)

    def _close(self, session: EnvSession) -> None:
        """Runs on a worker thread: closing an env may take a while (worker processes)."""
        session.close()
        with self._lock:
            known = session in self._sessions
            self._sessions.discard(session)
        if known:
            self.servicer.close_session()

    async def one_shot(self, env: str, reset: dict[str, Any], action: Any = None) -> dict:
        """A stateless HTTP /reset or /step: an env for the request only, counted like a
        session while it lasts."""
        self._check_env(env)
        session = EnvSession(env, self._build)
        self._open(session)
        try:
            payload = await self._run(session.reset, reset)
            if action is not None:
                payload = await self._run(session.step, action)
            self.servicer.metrics.env_steps(1)
            return payload
        finally:
            await self._run(self._close, session)

    async def schema(self, env: str) -> dict[str, Any]:
        self._check_env(env)
        if env not in self._schemas:  # built once per env, from an env with its defaults
            session = EnvSession(env, self._build)
            self._open(session)
            try:
                await self._run(session.reset, {})
                assert session.info is not None
                self._schemas[env] = env_schemas(session.info)
            finally:
                await self._run(self._close, session)
        return self._schemas[env]

    async def websocket(self, websocket: WebSocket, env: str) -> None:
        """One OpenEnv session (see the module docstring for the messages)."""
        from fastapi import WebSocketDisconnect

        try:
            self._check_env(env)
            session = EnvSession(env, self._build)
            self._open(session)
        except OpenEnvError as exc:
            await self._refuse(websocket, exc)
            return
        log_event(logger, "openenv session opened", env=env)
        try:
            await websocket.accept()
            while True:
                try:
                    message = await asyncio.wait_for(websocket.receive(), self.idle_s)
                except TimeoutError:  # an abandoned client gives its place back
                    await self._close_idle(websocket, env)
                    return
                if message["type"] == "websocket.disconnect":
                    break
                answer = await self._answer(session, message)
                if answer is None:  # the client's close
                    break
                await websocket.send_text(json.dumps(answer))
        except WebSocketDisconnect:
            pass
        finally:
            await self._run(self._close, session)
            log_event(logger, "openenv session closed", env=env, steps=session.step_count)
        with _suppress_closed():
            await websocket.close()

    async def _answer(self, session: EnvSession, message: dict[str, Any]) -> dict | None:
        try:
            kind, data = self._parse(message)
            if kind == "close":
                return None
            if kind == "state":
                return {"type": "state", "data": session.state()}
            handler = session.reset if kind == "reset" else session.step
            try:
                payload = await self._run(handler, data)
            except OpenEnvError:
                raise
            except WorldError as exc:  # a world's own check of the input
                raise OpenEnvError(exc.field, str(exc)) from None
            except Exception as exc:  # a broken env: report it, keep the session and server
                logger.exception("openenv %s failed", kind)
                raise OpenEnvError(kind, f"the env failed: {type(exc).__name__}",
                                   "EXECUTION_ERROR", 500) from None  # fmt: skip
            if kind == "step":
                self.servicer.metrics.env_steps(1)
            return {"type": "observation", "data": payload}
        except OpenEnvError as exc:
            self.servicer.metrics.error(f"openenv_{exc.code.lower()}", exc.field)
            return {"type": "error", "data": _error_data(exc)}

    @staticmethod
    def _parse(message: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        text = message.get("text")
        if text is None:
            raise OpenEnvError("message", "send JSON text frames, not binary ones")
        raw = text.encode("utf-8", "surrogatepass")
        try:
            check_json_body(raw)
            value = json.loads(text)
        except JsonLimitError as exc:
            raise OpenEnvError(
                exc.field.replace("body", "message", 1), str(exc).split(": ", 1)[-1]
            ) from None
        except ValueError as exc:
            raise OpenEnvError("message", f"invalid JSON: {exc}", "INVALID_JSON") from None
        if not isinstance(value, dict):
            raise OpenEnvError("message", "expected a JSON object {'type': ..., 'data': ...}")
        kind = value.get("type")
        if kind not in MESSAGE_TYPES:
            raise OpenEnvError(
                "type",
                f"unknown message type {kind!r}; types: {', '.join(MESSAGE_TYPES)}",
                "UNKNOWN_TYPE",
            )
        try:
            parsed = _WsMessage.model_validate(value)
        except ValidationError as exc:
            raise _validation_message(
                exc, "message", "a message is {'type': ..., 'data': {...}}"
            ) from None
        return parsed.type, parsed.data

    async def _close_idle(self, websocket: WebSocket, env: str) -> None:
        """Tell an idle session why it ends (its client raises the message on its next
        call), then close it; the caller's `finally` frees its env and connection."""
        exc = OpenEnvError(
            "openenv_idle_s",
            f"this session sent no message for {self.idle_s:g} s (the simulator's "
            "openenv_idle_s) and was closed; open a new session",
            "SESSION_IDLE",
        )
        self.servicer.metrics.error("openenv_session_idle", exc.field)
        log_event(logger, "openenv session idle", env=env, idle_s=self.idle_s)
        with _suppress_closed():
            await websocket.send_text(json.dumps({"type": "error", "data": _error_data(exc)}))
            await websocket.close(code=CLOSE_IDLE, reason="openenv_idle_s")

    async def _refuse(self, websocket: WebSocket, exc: OpenEnvError) -> None:
        """Accept, answer the client's first message with the refusal, close: OpenEnv's client
        then raises it with the message (a refused handshake would only say 'HTTP 403')."""
        log_event(logger, "openenv session refused", error=str(exc))
        await websocket.accept()
        with _suppress_closed():
            with contextlib.suppress(TimeoutError):  # a silent client gets the refusal too
                await asyncio.wait_for(websocket.receive(), REFUSAL_WAIT_S)
            await websocket.send_text(json.dumps({"type": "error", "data": _error_data(exc)}))
            code = CLOSE_CAPACITY if exc.code == "CAPACITY_REACHED" else CLOSE_UNKNOWN
            await websocket.close(code=code, reason=exc.field[:100])

    def close_all(self) -> None:
        with self._lock:
            sessions = list(self._sessions)
        for session in sessions:
            self._close(session)
        self.executor.shutdown(wait=False, cancel_futures=True)


def _suppress_closed() -> contextlib.suppress:
    """Ignore a WebSocket the client already closed (sending to it raises)."""
    from starlette.websockets import WebSocketDisconnect

    return contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError)


def add_openenv_routes(app: Any, endpoints: OpenEnvEndpoints) -> None:
    """The OpenEnv routes under /openenv on a FastAPI app."""
    from fastapi import Body
    from fastapi.responses import JSONResponse

    def refused(exc: OpenEnvError) -> JSONResponse:
        return JSONResponse({"detail": str(exc), "field": exc.field}, status_code=exc.status)

    tags = ["openenv"]

    @app.get(PREFIX, tags=tags, summary="The envs served over OpenEnv, with their base URLs")
    def list_envs() -> dict[str, Any]:
        return {"envs": [{"env": env, "base_url": f"{PREFIX}/{env}"} for env in env_ids()]}

    @app.post(f"{PREFIX}/{{env}}/reset", tags=tags, summary="A fresh episode's first observation")
    async def reset(env: str, body: ResetBody = Body(default_factory=ResetBody)) -> Any:
        try:
            return await endpoints.one_shot(env, body.model_dump(exclude_unset=True))
        except OpenEnvError as exc:
            return refused(exc)

    @app.post(f"{PREFIX}/{{env}}/step", tags=tags, summary="One action in a fresh episode")
    async def step(env: str, body: StepBody) -> Any:
        reset = {"seed": body.seed, **(body.model_extra or {})}
        try:
            return await endpoints.one_shot(env, reset, body.action)
        except OpenEnvError as exc:
            return refused(exc)

    @app.get(
        f"{PREFIX}/{{env}}/state", tags=tags, summary="A fresh env's state (HTTP is stateless)"
    )
    def state(env: str) -> Any:
        try:
            endpoints._check_env(env)
        except OpenEnvError as exc:
            return refused(exc)
        return {"episode_id": None, "step_count": 0, "env": env, "seed": None, "settings": {}}

    @app.get(f"{PREFIX}/{{env}}/schema", tags=tags, summary="Action, observation, state schemas")
    async def schema(env: str) -> Any:
        try:
            return await endpoints.schema(env)
        except OpenEnvError as exc:
            return refused(exc)

    @app.get(f"{PREFIX}/{{env}}/health", tags=tags, summary="OpenEnv's health check")
    def health(env: str) -> Any:
        try:
            endpoints._check_env(env)
        except OpenEnvError as exc:
            return refused(exc)
        return {"status": "healthy"}

    @app.get(f"{PREFIX}/{{env}}/metadata", tags=tags, summary="The env's name and description")
    def metadata(env: str) -> Any:
        try:
            endpoints._check_env(env)
        except OpenEnvError as exc:
            return refused(exc)
        entry = registry.entry("env", env)
        return {
            "name": env,
            "description": entry.description,
            "readme_content": None,
            "version": None,
            "author": None,
            "documentation_url": None,
        }

    @app.websocket(f"{PREFIX}/{{env}}/ws")
    async def session(websocket: WebSocket, env: str) -> None:
        await endpoints.websocket(websocket, env)


# -- the simulator's HTTP port: /health, /metrics and the OpenEnv routes ---------------------
def websockets_available() -> bool:
    """Whether uvicorn can serve WebSockets here (it needs `websockets` or `wsproto`)."""
    import importlib.util

    return any(importlib.util.find_spec(name) for name in ("websockets", "wsproto"))


def simulator_app(
    servicer: SimulatorServicer,
    token: str | None,
    check: Callable[[], dict[str, Any]],
    idle_s: float,
) -> tuple[Any, OpenEnvEndpoints]:
    """The FastAPI app of the simulator's HTTP port, and its OpenEnv endpoints (sessions
    closed after `idle_s` seconds without a message)."""
    from fastapi import FastAPI

    from llmrl.common.auth import add_bearer_auth
    from llmrl.common.http import ERROR_RESPONSES, configured_max_body_bytes, guard_app
    from llmrl.common.metrics import add_health_and_metrics

    endpoints = OpenEnvEndpoints(servicer, idle_s)
    app = FastAPI(
        title="llmrl simulator",
        version="1",
        description="Health, metrics, and every registered env over OpenEnv's protocol",
        responses=ERROR_RESPONSES,
    )
    guard_app(app, configured_max_body_bytes())
    add_health_and_metrics(
        app, "simulator", lambda: {**check(), "openenv_sessions": endpoints.session_count}
    )
    add_openenv_routes(app, endpoints)
    add_bearer_auth(app, token)  # added last: it runs first, before a body is read
    return app, endpoints


class HttpServer:
    """uvicorn serving `app` on a thread, on a socket bound here (so that a busy port is an
    OSError at once, and port 0 picks a free one)."""

    def __init__(self, app: Any, host: str, port: int) -> None:
        import uvicorn

        from llmrl.common.http import configured_max_body_bytes
        from llmrl.common.tls import uvicorn_options

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.socket.bind((host, port))
        except OSError:
            self.socket.close()
            raise
        self.port: int = self.socket.getsockname()[1]
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            ws_max_size=configured_max_body_bytes(),  # a WebSocket message is bounded too
            timeout_graceful_shutdown=2,
            **uvicorn_options(),  # HTTPS when LLMRL_TLS_CERT/KEY are set
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, name="simulator-http",
            daemon=True,
        )  # fmt: skip

    def start(self, timeout_s: float = 30.0) -> None:
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise OSError(f"the HTTP server did not start on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.socket.close()
