"""What a process that plays episodes holds: a world per environment and an LLM client."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RolloutResources:
    """A world per (environment, kwargs) and the gateway client, shared by the episodes a
    process plays.

    `simulator` None plays in-process worlds and `llm_gateway` None uses an in-process gateway
    (embedded mode); the gateway client is only connected when a driver needs it.
    """

    simulator: str | None = None
    llm_gateway: str | None = None
    world_factory: Callable[..., Any] | None = None  # default: llmrl.simulator.client.make_world
    _worlds: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _llm: Any = None

    @property
    def llm(self) -> Any:
        """The LLM gateway client (contract 3), connected on first use."""
        with self._lock:
            if self._llm is None:
                try:
                    from llmrl.llm_gateway.client import connect
                except ModuleNotFoundError as exc:
                    raise RuntimeError(f"the LLM gateway client is not available: {exc}") from exc
                self._llm = connect(self.llm_gateway)
            return self._llm

    def world(self, env: str, env_kwargs: dict[str, Any]) -> Any:
        key = json.dumps([env, env_kwargs], sort_keys=True)
        with self._lock:
            if key not in self._worlds:
                factory = self.world_factory or _default_world_factory()
                self._worlds[key] = factory(env, num_envs=1, address=self.simulator, **env_kwargs)
            return self._worlds[key]

    def drop_world(self, env: str, env_kwargs: dict[str, Any]) -> None:
        """Forget a world after an error (e.g. the simulator restarted); closes it if it can."""
        key = json.dumps([env, env_kwargs], sort_keys=True)
        with self._lock:
            world = self._worlds.pop(key, None)
        if world is not None:
            with contextlib.suppress(Exception):  # best effort on an already broken world
                world.close()

    def close(self) -> None:
        with self._lock:
            worlds, self._worlds = list(self._worlds.values()), {}
            llm, self._llm = self._llm, None
        if llm is not None:
            llm.close()
        for world in worlds:
            with contextlib.suppress(Exception):  # closing what may already be gone
                world.close()


def _default_world_factory() -> Callable[..., Any]:
    from llmrl.simulator.client import make_world

    return make_world
