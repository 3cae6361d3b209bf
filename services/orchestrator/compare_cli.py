"""The `llmrl compare`, `llmrl runs` and `llmrl tensorboard` commands."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import click
import httpx

from llmrl.common.console import output_console
from llmrl.common.plugins import load_plugins
from llmrl.orchestrator.browse import local_runs, print_runs, remote_runs, tensorboard_command
from llmrl.orchestrator.compare import (
    RunData,
    build_report,
    format_estimate,
    method_name,
    print_report,
)
from llmrl.orchestrator.sources import UnknownReference, resolve_local, resolve_remote
from llmrl.recipes.context import tensorboard_root


def _remote_client(url: str):  # type: ignore[no-untyped-def]
    from llmrl.orchestrator.rest_client import OrchestratorClient

    return OrchestratorClient(url)


def cli_compare(references: list[str], out: Path, url: str | None, title: str | None) -> None:
    load_plugins()  # recipes' headline metrics, plugins' recipes too
    runs: list[RunData] = []
    titles: list[str] = []
    client = _remote_client(url) if url else None
    try:
        for reference in references:
            found, what = resolve_remote(client, reference) if client else resolve_local(reference)
            runs += [run for run in found if run.run_id not in {r.run_id for r in runs}]
            titles.append(what)
    except UnknownReference as exc:
        raise click.UsageError(str(exc)) from exc
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach the orchestrator at {url}: {exc}") from exc
    finally:
        if client is not None:
            client.close()
    report = build_report(runs, out, title or "; ".join(titles))
    console = output_console()
    console.print(f"{len(report['runs'])} runs, {len(report['configs'])} configs")
    for method in report["methods"]:
        figures = ", ".join(
            f"{metric} {format_estimate(value)}" for metric, value in method["metrics"].items()
        )
        console.print(f"  {method_name(method)}: {figures}")
    print_report(console, report)
    console.print(f"report: {out.resolve() / 'results.md'}")


def cli_runs(url: str | None) -> None:
    load_plugins()
    if url is None:
        rows = local_runs()
    else:
        client = _remote_client(url)
        try:
            rows = remote_runs(client)
        except httpx.HTTPError as exc:
            raise click.ClickException(f"cannot reach the orchestrator at {url}: {exc}") from exc
        finally:
            client.close()
    print_runs(rows)
    if url is None:
        click.echo(f"TensorBoard for all of them: llmrl tensorboard (logs in {tensorboard_root()})")


def cli_tensorboard(print_only: bool, port: int | None) -> None:
    root = tensorboard_root()
    command = tensorboard_command(root, port)
    if print_only:
        click.echo(" ".join(command))
        return
    if importlib.util.find_spec("tensorboard") is None:
        raise click.ClickException(
            f"tensorboard is not installed (pip install 'llmrl[learn]'); the logs are in {root}"
        )
    root.mkdir(parents=True, exist_ok=True)
    click.echo(" ".join(command), err=True)
    # this interpreter's tensorboard, whether or not its scripts folder is on PATH
    sys.exit(subprocess.call([sys.executable, "-m", "tensorboard.main", *command[1:]]))
