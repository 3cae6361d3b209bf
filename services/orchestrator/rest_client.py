"""A small client of the orchestrator's REST API, and the `llmrl submit|status|cancel` commands.

The bearer token, when the orchestrator wants one, comes from LLMRL_TOKEN (or its alias
LLMRL_ORCHESTRATOR_TOKEN).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click
import httpx
from rich.console import Console
from rich.table import Table
from rich.text import Text

from llmrl.common.auth import auth_headers
from llmrl.common.console import output_console
from llmrl.common.tls import http_verify

FINAL_STATES = ("completed", "failed", "cancelled")


class OrchestratorClient:
    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0) -> None:
        headers = auth_headers(token)
        self.http = httpx.Client(
            base_url=url.rstrip("/"), headers=headers, timeout=timeout, verify=http_verify()
        )

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

    def submit_experiment(self, spec: dict[str, Any]) -> dict[str, Any]:
        return self._json(self.http.post("/experiments", json=spec))

    def experiment(self, experiment_id: str) -> dict[str, Any]:
        return self._json(self.http.get(f"/experiments/{experiment_id}"))

    def experiments(self) -> list[dict[str, Any]]:
        return self._json(self.http.get("/experiments"))

    def cancel_experiment(self, experiment_id: str) -> dict[str, Any]:
        return self._json(self.http.post(f"/experiments/{experiment_id}/cancel"))

    def wait_experiment(
        self, experiment_id: str, timeout: float = 3600.0, interval: float = 0.5
    ) -> dict[str, Any]:
        return _until_final(lambda: self.experiment(experiment_id), timeout, interval)

    def wait(self, run_id: str, timeout: float = 3600.0, interval: float = 0.5) -> dict[str, Any]:
        return _until_final(lambda: self.run(run_id), timeout, interval)

    def close(self) -> None:
        self.http.close()


def _until_final(
    fetch: Callable[[], dict[str, Any]], timeout: float, interval: float
) -> dict[str, Any]:
    """Poll a run's or an experiment's state until it is final (or `timeout` passed)."""
    deadline = time.monotonic() + timeout
    while True:
        state = fetch()
        if state["status"] in FINAL_STATES or time.monotonic() > deadline:
            return state
        time.sleep(interval)


class OrchestratorError(click.ClickException):
    def __init__(self, status: int, detail: str) -> None:
        hint = ""
        if status in (401, 403):  # which variable to set; never the token itself
            hint = (
                "; set LLMRL_TOKEN (or LLMRL_ORCHESTRATOR_TOKEN) to the token the orchestrator "
                "was started with"
            )
        super().__init__(f"orchestrator answered {status}: {detail}{hint}")
        self.status = status
        self.detail = detail


def _connect(url: str) -> OrchestratorClient:
    return OrchestratorClient(url)


def _print_run(console: Console, run: dict[str, Any]) -> None:
    table = Table(title=f"run {run['run_id']}", show_header=False)
    for key in ("recipe", "status", "current_phase", "progress", "episodes_stored", "error"):
        if run.get(key) is not None:
            table.add_row(key, Text(str(run[key])))  # an error's "[...]" is no markup
    for key, value in (run.get("summary") or {}).items():
        table.add_row(f"summary.{key}", str(value))
    llm = run.get("llm") or {}
    if llm:
        table.add_row("llm", f"{llm.get('calls', 0):g} calls, ${llm.get('cost_usd', 0):.4f}")
    console.print(table)


def _submit_and_follow(
    url: str,
    kind: str,
    submit: Callable[[OrchestratorClient], dict[str, Any]],
    follow: Callable[[OrchestratorClient, str], dict[str, Any]],
    show: Callable[[Console, dict[str, Any]], None],
    wait: bool,
) -> None:
    """Submit a run or an experiment (`kind`) and print its id; with `wait`, follow it to a
    final state, show it, and fail unless it completed."""
    console = output_console()
    client = _connect(url)
    id_key = f"{kind}_id"
    try:
        submitted = submit(client)
        console.print(submitted[id_key])
        if wait:
            with console.status(f"waiting for {submitted[id_key]}"):
                final = follow(client, submitted[id_key])
            show(console, final)
            if final["status"] != "completed":
                why = _why_not_completed(final)
                ended = f"{kind} {final[id_key]} {final['status']}"
                raise click.ClickException(f"{ended}: {why}" if why else ended)
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach the orchestrator at {url}: {exc}") from exc
    finally:
        client.close()


def run_failure(run: dict[str, Any]) -> str | None:
    """Why a run (or an experiment's run) did not complete, naming its phase: None when it
    has no error to tell (completed, cancelled, or still under way)."""
    if not run.get("error"):
        return None
    seed = f" (seed {run['seed']})" if run.get("seed") is not None else ""
    phase = f" in phase {run['current_phase']}" if run.get("current_phase") else ""
    return f"run {run['run_id']}{seed} {run['status']}{phase}: {run['error']}"


def _why_not_completed(final: dict[str, Any]) -> str:
    """A run's error, or an experiment's runs' errors, for the failure's one-line message."""
    if "runs" not in final:
        return str(final.get("error") or "")
    return "; ".join(why for run in final["runs"] if (why := run_failure(run)))


def cli_submit(recipe: str, config: dict[str, Any], url: str, wait: bool = False) -> None:
    _submit_and_follow(
        url, "run", lambda c: c.submit(recipe, config), OrchestratorClient.wait, _print_run, wait
    )


def print_experiment(console: Console, experiment: dict[str, Any]) -> None:
    """An experiment's state and each run's: id, grid point, seed, state; then why each run
    that failed did."""
    states = ", ".join(f"{n} {state}" for state, n in experiment["run_states"].items())
    console.print(
        f"experiment {experiment['experiment_id']}: {experiment['status']}"
        f"{' (cancel requested)' if experiment['cancel_requested'] else ''}; "
        f"{experiment['runs_total']} runs ({states}), at most {experiment['max_parallel']} at once"
    )
    table = Table(title=f"runs of {experiment['experiment_id']}")
    for column in ("run_id", "point", "seed", "status", "current_phase"):
        table.add_column(column)
    for run in experiment.get("runs", []):
        point = ", ".join(f"{k}={v}" for k, v in run["point"].items())
        table.add_row(
            run["run_id"], point, str(run["seed"]), run["status"], run["current_phase"] or ""
        )
    console.print(table)
    aggregate = experiment.get("aggregate")
    if aggregate:
        from llmrl.orchestrator.compare import format_estimate, format_number, method_name

        summary = Table(title="headline metrics: mean [95% CI] over seeds")
        for column in ("method", "metric", "mean [95% CI]", "IQM", "seeds"):
            summary.add_column(column)
        for method in aggregate["methods"]:
            for metric, value in method["metrics"].items():
                summary.add_row(
                    method_name(method),
                    metric,
                    format_estimate(value),
                    format_number(value["iqm"]),
                    str(value["n"]),
                )
        console.print(summary)
    for run in experiment.get("runs", []):  # last: what a reader of the output's tail sees
        why = run_failure(run)
        if why:
            console.print(Text(why, style="red"))


def cli_submit_experiment(spec: dict[str, Any], url: str, wait: bool = False) -> None:
    _submit_and_follow(
        url,
        "experiment",
        lambda c: c.submit_experiment(spec),
        OrchestratorClient.wait_experiment,
        print_experiment,
        wait,
    )


def cli_status(run_id: str | None, url: str) -> None:
    console = output_console()
    client = _connect(url)
    try:
        if run_id:
            try:
                _print_run(console, client.run(run_id))
            except OrchestratorError as exc:
                if exc.status != 404:
                    raise
                try:
                    experiment = client.experiment(run_id)
                except OrchestratorError as missing:
                    if missing.status != 404:
                        raise
                    raise exc from None  # neither a run nor an experiment: the run's 404
                print_experiment(console, experiment)
            return
        table = Table(title="runs")
        for column in ("run_id", "recipe", "status", "current_phase"):
            table.add_column(column)
        for run in client.runs():
            table.add_row(run["run_id"], run["recipe"], run["status"], run["current_phase"] or "")
        console.print(table)
        experiments = client.experiments()
        if experiments:
            table = Table(title="experiments")
            for column in ("experiment_id", "status", "runs"):
                table.add_column(column)
            for experiment in experiments:
                counts = ", ".join(f"{n} {s}" for s, n in experiment["run_states"].items())
                table.add_row(experiment["experiment_id"], experiment["status"], counts)
            console.print(table)
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach the orchestrator at {url}: {exc}") from exc
    finally:
        client.close()


def cli_cancel(run_id: str, url: str) -> None:
    client = _connect(url)
    try:
        try:
            run = client.cancel(run_id)
        except OrchestratorError as exc:
            if exc.status != 404:
                raise
            try:  # an experiment id: its queued runs never start, its running ones stop
                experiment = client.cancel_experiment(run_id)
            except OrchestratorError as missing:
                if missing.status != 404:
                    raise
                raise exc from None
            output_console().print(f"{experiment['experiment_id']}: cancel requested")
            return
        output_console().print(f"{run['run_id']}: cancel requested ({run['status']})")
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach the orchestrator at {url}: {exc}") from exc
    finally:
        client.close()
