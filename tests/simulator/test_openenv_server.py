"""The simulator's OpenEnv endpoints, played with OpenEnv's own client (openenv-core's
`GenericEnvClient`, plus the one-method subclass docs/operations/openenv.md shows for the
token) against a real `llmrl serve simulator` in its own process: full BabyAI-Text,
Crafter-text and Housekeep episodes, seeds, the shared caps, auth and bad input."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import random
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openenv.core.generic_client import GenericEnvClient
from support.processes import wait_until
from support.sim_server import AUTH, TOKEN, Server, start_server, stop_server
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from llmrl.simulator.client import RemoteWorld
from llmrl.simulator.world import World

BABYAI = "BabyAIText-GoToLocal"
BABYAI_PHRASES = ["turn left", "turn right", "go forward", "pick up", "drop", "toggle"]
BENCH = Path(__file__).resolve().parents[2] / "bench" / "simulator.py"
MAX_STEPS = 2000  # a bound on every episode loop: an env that never ends fails, not hangs


class LlmrlEnvClient(GenericEnvClient):
    """OpenEnv's client, sending the simulator's bearer token (the docs' subclass)."""

    async def connect(self) -> LlmrlEnvClient:
        self._ws = self._ws or await connect(
            self._ws_url,
            additional_headers={"Authorization": f"Bearer {os.environ['LLMRL_TOKEN']}"},
            max_size=self._max_message_size,
        )
        return self


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    """A simulator with the default caps (max_connections 64); its logs never hold the token."""
    server = start_server()
    yield server
    code, stdout, stderr = stop_server(server)
    assert code == 0
    assert TOKEN not in stdout + stderr


def base_url(server: Server, env: str) -> str:
    return f"{server.http}/openenv/{env}"


def session(server: Server, env: str) -> Any:
    return LlmrlEnvClient(base_url=base_url(server, env)).sync()


def http(server: Server, method: str, path: str, body: Any = None, token: bool = True) -> Any:
    """(status, JSON body) of an HTTP request to the simulator."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **(AUTH if token else {})}
    request = urllib.request.Request(server.http + path, data, headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def play(env: Any, rng: random.Random, first: Any) -> tuple[int, Any]:
    """Step random legal phrases until the episode ends; (steps, last result)."""
    result, steps = first, 0
    while not result.done:
        assert steps < MAX_STEPS
        result = env.step({"phrase": rng.choice(result.observation["action_phrases"])})
        steps += 1
    return steps, result


def test_a_full_babyai_text_episode(server: Server) -> None:
    with session(server, BABYAI) as env:
        first = env.reset(seed=1)
        observation = first.observation
        assert observation["mission"] and observation["text"]
        assert observation["action_phrases"] == BABYAI_PHRASES
        assert "oracle_plan" not in observation and "mission_tokens" not in observation
        steps, last = play(env, random.Random(0), first)
        assert steps > 0 and last.done
        assert isinstance(last.reward, float)
        state = env.state()
        assert state["step_count"] == steps and state["env"] == BABYAI and state["seed"] == 1
        with pytest.raises(RuntimeError, match="episode is over"):
            env.step({"phrase": "go forward"})
        assert not env.reset(seed=2).done  # the next episode, in the same session


def test_a_full_crafter_text_episode_with_a_step_limit(server: Server) -> None:
    with session(server, "CrafterText") as env:
        first = env.reset(seed=3, length=12)
        assert first.observation["text"] and "noop" in first.observation["action_phrases"]
        steps, last = play(env, random.Random(1), first)
        assert steps <= 12
        assert last.observation["truncated"] == (steps == 12)  # cut at the limit, or died
        assert env.state()["settings"] == {"length": 12}


def test_a_full_housekeep_episode(server: Server) -> None:
    """A procedural house (the env's default without a data set)."""
    with session(server, "Housekeep") as env:
        first = env.reset(seed=5, max_steps=10)
        assert first.observation["text"].startswith("Rooms of the house")
        assert "mission complete" in first.observation["action_phrases"]  # feasible skills
        assert "correct_receptacles" not in first.observation  # privileged: never sent
        steps, last = play(env, random.Random(2), first)
        assert 0 < steps <= 10 and last.done


def test_a_full_housekeep_episode_on_the_real_data(server: Server, data_dir: Any) -> None:
    """The server reads the data its operator configured (LLMRL_HOUSEKEEP_DATA, or `llmrl data
    get housekeep`'s copy); a session asks for a split, never for a path."""
    with session(server, "Housekeep") as env:
        first = env.reset(seed=0, split="val", max_steps=15)
        steps, last = play(env, random.Random(3), first)
        assert 0 < steps <= 15 and last.done


def test_the_same_seed_gives_the_same_episode(server: Server) -> None:
    phrases = ["go forward", "turn left", "go forward", "pick up", "turn right"]
    runs = []
    for _ in range(2):
        with session(server, BABYAI) as env:
            observations = [env.reset(seed=11).observation]
            observations += [env.step({"phrase": p}).observation for p in phrases]
            runs.append(observations)
    assert runs[0] == runs[1]
    with session(server, BABYAI) as env:
        assert env.reset(seed=12).observation != runs[0][0]
    # the stateless HTTP /reset gives the same first observation for the same seed
    status, body = http(server, "POST", f"/openenv/{BABYAI}/reset", {"seed": 11})
    assert status == 200 and body["observation"] == runs[0][0] and body["done"] is False


def test_sixty_four_sessions_at_once_then_the_next_is_refused(server: Server) -> None:
    """64 sessions step at once (max_connections is 64); the 65th is refused naming the
    setting, the current use and the limit; closed sessions free their places."""

    async def scenario() -> None:
        clients = [LlmrlEnvClient(base_url=base_url(server, BABYAI)) for _ in range(64)]
        await asyncio.gather(*(client.connect() for client in clients))
        try:
            firsts = await asyncio.gather(
                *(client.reset(seed=i) for i, client in enumerate(clients))
            )
            assert all(not first.done for first in firsts)
            steps = await asyncio.gather(
                *(client.step({"phrase": "go forward"}) for client in clients)
            )
            assert all("text" in step.observation for step in steps)
            health = await asyncio.to_thread(server.health)
            assert health["openenv_sessions"] == 64 and health["envs"] == 64
            extra = LlmrlEnvClient(base_url=base_url(server, BABYAI))
            with pytest.raises(RuntimeError) as refused:
                await extra.reset()
            message = str(refused.value)
            assert "max_connections: this server serves 64 connections" in message
            assert "at most 64" in message and "CAPACITY_REACHED" in message
            await extra.close()
        finally:
            await asyncio.gather(*(client.close() for client in clients))

    asyncio.run(scenario())
    with session(server, BABYAI) as env:  # the places are free again
        assert not env.reset(seed=0).done
    assert server.health()["openenv_sessions"] == 0


def test_sessions_and_worlds_share_max_envs_total() -> None:
    capped = start_server({"max_envs_total": 3})
    try:
        with RemoteWorld(capped.address, "SimTestCorridor", num_envs=2) as world:
            world.reset()
            with session(capped, BABYAI) as first:
                first.reset(seed=0)
                with pytest.raises(RuntimeError) as refused, session(capped, BABYAI) as second:
                    second.reset(seed=0)
                message = str(refused.value)
                assert "max_envs_total: this server hosts 3 envs" in message
                assert "limit of 3" in message
                status, body = http(capped, "POST", f"/openenv/{BABYAI}/reset", {})
                assert status == 429 and body["field"] == "max_envs_total"
            # the server frees a session when it sees its WebSocket close, just after the
            # client has closed it
            wait_until(lambda: capped.health()["openenv_sessions"] == 0, 30, "the sessions' end")
            with session(capped, BABYAI) as third:  # the first one's env was given back
                assert not third.reset(seed=0).done
    finally:
        assert stop_server(capped)[0] == 0


def test_an_idle_session_is_closed_and_gives_its_place_back() -> None:
    """A client that stops sending is closed after openenv_idle_s, with an error naming the
    setting on its next call; with one connection allowed, the next client gets the place."""
    idle = start_server({"max_connections": 1, "openenv_idle_s": 1})
    try:
        with session(idle, BABYAI) as abandoned:
            assert not abandoned.reset(seed=0).done
            wait_until(lambda: idle.health()["openenv_sessions"] == 0, 30, "the idle close")
            # the server's close (1001, going away) names the setting
            with pytest.raises(ConnectionClosed, match=r"1001.*openenv_idle_s"):
                abandoned.step({"phrase": "go forward"})
        with session(idle, BABYAI) as next_client:  # the one connection is free again
            assert not next_client.reset(seed=1).done
            assert "text" in next_client.step({"phrase": "go forward"}).observation
    finally:
        assert stop_server(idle)[0] == 0


def test_an_unusable_idle_setting_is_refused_naming_it() -> None:
    from llmrl.simulator.service import _check_settings

    for value in (0, float("inf"), "soon", True, 10**6):
        with pytest.raises(ValueError, match=r"^openenv_idle_s: expected a finite number"):
            _check_settings({"openenv_idle_s": value})


def test_a_session_without_the_token_is_refused(server: Server) -> None:
    env = GenericEnvClient(base_url=base_url(server, BABYAI)).sync()
    with pytest.raises(ConnectionError, match="HTTP 403"):
        env.connect()

    async def wrong_token() -> None:
        url = base_url(server, BABYAI).replace("http", "ws", 1) + "/ws"
        await connect(url, additional_headers={"Authorization": "Bearer not-the-token"})

    with pytest.raises(Exception, match="HTTP 403"):
        asyncio.run(wrong_token())
    for method, path, body in [
        ("GET", f"/openenv/{BABYAI}/schema", None),
        ("POST", f"/openenv/{BABYAI}/reset", {}),
        ("GET", "/openenv", None),
    ]:
        status, answer = http(server, method, path, body, token=False)
        assert status == 401 and "bearer token" in answer["detail"]
    assert server.health()["status"] == "ok"  # /health stays open


def test_bad_input_gets_a_named_error_and_the_server_keeps_serving(server: Server) -> None:
    with session(server, BABYAI) as env:
        for call, message in [
            (lambda: env.step({"phrase": "go forward"}), "type: no episode yet"),
            (lambda: env.reset(colour=1), "colour: unknown reset setting .* settings: seed"),
            (lambda: env.reset(data_dir="/etc"), "data_dir: not accepted over OpenEnv"),
            (lambda: env.reset(num_envs=4), "num_envs: not accepted over OpenEnv"),
            (lambda: env.reset(seed=-1), "data.seed: .*greater than or equal to 0"),
            (lambda: env.reset(level="NoSuchLevel"), "settings: env .* refused"),
        ]:
            with pytest.raises(RuntimeError, match=message):
                call()
        env.reset(seed=4)
        for action, message in [
            ({"phrase": "fly"}, "phrase: unknown action 'fly'; valid actions: turn left"),
            ({"action": 99}, "action: .*0..5"),
            ({"action": "2"}, "action.action"),
            ({"move": 1}, "action.move: Extra inputs are not permitted"),
            ({}, "exactly one of `action` and `phrase`"),
        ]:
            with pytest.raises(RuntimeError, match=message):
                env.step(action)
        assert "text" in env.step({"action": 2}).observation  # the session goes on


def test_unknown_messages_and_envs_are_named(server: Server) -> None:
    async def scenario() -> None:
        async with LlmrlEnvClient(base_url=base_url(server, BABYAI)) as env:
            with pytest.raises(RuntimeError, match="type: unknown message type 'jump'"):
                await env._send_and_receive({"type": "jump"})
            assert env._ws is not None
            for raw, code in [("{not json", "INVALID_JSON"), ('"reset"', "VALIDATION_ERROR")]:
                await env._ws.send(raw)  # what OpenEnv's client never sends: raw frames
                answer = await env._receive()
                assert answer["type"] == "error" and answer["data"]["code"] == code
                assert answer["data"]["field"] == "message"
            assert not (await env.reset(seed=0)).done  # still serving this session
        async with LlmrlEnvClient(base_url=base_url(server, "NoSuchEnv")) as env:
            with pytest.raises(RuntimeError, match="env: unknown env 'NoSuchEnv'; envs: "):
                await env.reset()

    asyncio.run(scenario())
    for path, body, status, field in [
        (f"/openenv/{BABYAI}/reset", {"seed": -1}, 422, "seed"),
        (f"/openenv/{BABYAI}/reset", {"colour": 1}, 422, "colour"),
        (f"/openenv/{BABYAI}/step", {"action": {"phrase": "fly"}}, 422, "phrase"),
        ("/openenv/NoSuchEnv/reset", {}, 404, "env"),
    ]:
        code, answer = http(server, "POST", path, body)
        assert code == status, answer
        assert field in json.dumps(answer)
    code, answer = http(server, "POST", f"/openenv/{BABYAI}/step", {"action": {"action": 2}})
    assert code == 200 and set(answer) == {"observation", "reward", "done"}
    assert server.health()["status"] == "ok"


def test_schemas_describe_each_env(server: Server) -> None:
    code, point = http(server, "GET", "/openenv/PointReach/schema")
    assert code == 200 and set(point) == {"action", "observation", "state"}
    box = point["action"]["properties"]["action"]
    assert box["type"] == "array" and box["minItems"] == box["maxItems"] == 2
    assert box["items"] == {"type": "number", "minimum": -1.0, "maximum": 1.0}
    assert "phrase" not in point["action"]["properties"]  # not a text env
    assert point["observation"]["properties"]["position"]["type"] == "array"
    code, crafter = http(server, "GET", "/openenv/CrafterText/schema")
    assert "noop" in crafter["action"]["properties"]["phrase"]["enum"]
    assert crafter["observation"]["properties"]["text"]["type"] == "string"
    code, listing = http(server, "GET", "/openenv")
    assert {"env": BABYAI, "base_url": f"/openenv/{BABYAI}"} in listing["envs"]
    code, meta = http(server, "GET", f"/openenv/{BABYAI}/metadata")
    assert meta["name"] == BABYAI and meta["description"]
    with session(server, "PointReach") as env:  # a continuous env, stepped with its action
        env.reset(seed=0)
        result = env.step({"action": [0.5, -0.5]})
        assert len(result.observation["position"]) == 2
        with pytest.raises(RuntimeError, match="action: "):
            env.step({"action": [3.0, 0.0]})


def test_the_bench_openenv_path_replays_the_worlds_episodes(server: Server) -> None:
    """bench/simulator.py's `openenv` mode: N sessions stepped as a batch play the episodes an
    in-process world of N envs plays (same seeds, same actions, same auto-reset)."""
    spec = importlib.util.spec_from_file_location("llmrl_bench_simulator_openenv", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    world = World("SimTestCorridor", num_envs=4, seed=0)
    stepper = bench.OpenEnvStepper(server.http, "SimTestCorridor", 4)
    try:
        actions = bench.random_actions(world, 40)
        runs = bench.measure({"in_process": world, "openenv": stepper}, actions, 2)
    finally:
        stepper.close()
        world.close()
    assert runs["openenv"]["steps"] == runs["in_process"]["steps"] == [160, 160]
    assert all(rate > 0 for rate in runs["openenv"]["rates"])
    assert runs["openenv"]["rewards"] == pytest.approx(runs["in_process"]["rewards"])
