"""A small client of the orchestrator's REST API, and the `llmrl submit|status|cancel` commands.

The bearer token, when the orchestrator wants one, comes from LLMRL_ORCHESTRATOR_TOKEN.
"""

from __future__ import annotations

import os
import time
from typing import Any

import click
import httpx
from rich.console import Console
from rich.table import Table

from llmrl.common.console import output_console
from llmrl.orchestrator.service import TOKEN_VAR

FINAL_STATES = ("completed", "failed", "cancelled")


class OrchestratorClient:
    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0) -> None:
        token = token or os.environ.get(TOKEN_VAR) or None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)

    def _json(self, response: httpx.Response) -> Any:
        if response.is_error:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            raise OrchestratorError(response.status_code, str(detail))
        return response.json()

    def submit(self, recipe: str, config: dict[str, Any]) -> dict[str, Any]:
        return self._json(self.http.post("/runs", json={"recipe": recipe, "config": config}))

    def run(self, run_id: str) -> dict[str, Any]:
        return self._json(self.http.get(f"/runs/{run_id}"))

    def runs(self) -> list[dict[str, Any]]:
        return self._json(self.http.get("/runs"))

    def cancel(self, run_id: str) -> dict[str, Any]:
        return self._json(self.http.post(f"/runs/{run_id}/cancel"))

    def episodes(self, run_id: str, offset: int = 0, limit: int = 100) -> dict[str, Any]:
        return self._json(
            self.http.get(f"/runs/{run_id}/episodes", params={"offset": offset, "limit": limit})
        )

    def artifact(self, run_id: str, name: str) -> bytes:
        response = self.http.get(f"/runs/{run_id}/artifacts/{name}")
        if response.is_error:
            self._json(response)
        return response.content

    def wait(self, run_id: str, timeout: float = 3600.0, interval: float = 0.5) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            run = self.run(run_id)
            if run["status"] in FINAL_STATES or time.monotonic() > deadline:
                return run
            time.sleep(interval)

    def close(self) -> None:
        self.http.close()


class OrchestratorError(click.ClickException):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"orchestrator answered {status}: {detail}")
        self.status = status
        self.detail = detail


def _connect(url: str) -> OrchestratorClient:
    return OrchestratorClient(url)


def _print_run(console: Console, run: dict[str, Any]) -> None:
    table = Table(title=f"run {run['run_id']}", show_header=False)
    for key in ("recipe", "status", "current_phase", "progress", "episodes_stored", "error"):
        if run.get(key) is not None:
            table.add_row(key, str(run[key]))
    for key, value in (run.get("summary") or {}).items():
        table.add_row(f"summary.{key}", str(value))
    llm = run.get("llm") or {}
    if llm:
        table.add_row("llm", f"{llm.get('calls', 0):g} calls, ${llm.get('cost_usd', 0):.4f}")
    console.print(table)


def cli_submit(recipe: str, config: dict[str, Any], url: str, wait: bool = False) -> None:
    console = output_console()
    client = _connect(url)
    try:
        run = client.submit(recipe, config)
        console.print(run["run_id"])
        if wait:
            with console.status(f"waiting for {run['run_id']}"):
                final = client.wait(run["run_id"])
            _print_run(console, final)
            if final["status"] != "completed":
                raise click.ClickException(f"run {final['run_id']} {final['status']}")
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach the orchestrator at {url}: {exc}") from exc
    finally:
        client.close()


def cli_status(run_id: str | None, url: str) -> None:
    console = output_console()
    client = _connect(url)
    try:
        if run_id:
            _print_run(console, client.run(run_id))
            return
        table = Table(title="runs")
        for column in ("run_id", "recipe", "status", "current_phase"):
            table.add_column(column)
        for run in client.runs():
            table.add_row(run["run_id"], run["recipe"], run["status"], run["current_phase"] or "")
        console.print(table)
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach the orchestrator at {url}: {exc}") from exc
    finally:
        client.close()


def cli_cancel(run_id: str, url: str) -> None:
    client = _connect(url)
    try:
        run = client.cancel(run_id)
        Console().print(f"{run['run_id']}: cancel requested ({run['status']})")
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach the orchestrator at {url}: {exc}") from exc
    finally:
        client.close()
