"""The `llmrl` command line: runs, services, workers, and what is registered.

Every command imports its implementation lazily, so `llmrl --help` and `llmrl envs` stay fast
and a missing optional extra only affects the commands that need it.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import click

from llmrl.common import config as cfg
from llmrl.common import datasets

SERVICE_MODULES = {
    "simulator": "llmrl.simulator.service",
    "llm_gateway": "llmrl.llm_gateway.service",
    "learner": "llmrl.learner.service",
    "annotator": "llmrl.annotator.service",
    "orchestrator": "llmrl.orchestrator.service",
}


def _load(module: str, attr: str) -> Any:
    try:
        return getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("llmrl"):
            raise click.ClickException(
                f"{module} is not available in this version of llmrl"
            ) from exc
        raise click.ClickException(
            f"the Python package {exc.name!r} is missing; install everything with "
            "`pip install 'llmrl[all]'` (see README)"
        ) from exc


def _settings(
    config_file: str | None, sets: tuple[str, ...], hint: str = "OVERRIDES (key=value)"
) -> dict[str, Any]:
    settings: dict[str, Any] = cfg.load_yaml(config_file) if config_file else {}
    try:
        overrides = cfg.parse_overrides(sets)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=hint) from exc
    return cfg.deep_merged(settings, overrides)


def _allow_working_folder() -> None:
    """An embedded run may read the files under the folder its user runs it from (their
    earlier runs: `grounding_from=runs/kalm/grounding/1`); services never do this."""
    from llmrl.common.paths import allow_root

    allow_root(Path.cwd())


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="llmrl")
def main() -> None:
    """llmrl: reinforcement learning with large language models in the loop.

    Start with `llmrl recipes` and `llmrl run evaluate`. Default ports and the environment
    variables that override them are listed in the README. Models compute in float32 and the
    CPU's code paths are pinned on every machine; Adam takes torch's own kernel unless told
    the fused one ($LLMRL_PRECISION, $LLMRL_PIN_CPU_PATHS, $LLMRL_ADAM: docs/concepts.md,
    "Numerics").
    """
    from llmrl.common.logs import configure_console_logging
    from llmrl.common.numerics import adam_kernel, pin_cpu_paths, precision

    pin_cpu_paths()  # before any command imports torch; services and workers inherit it
    try:  # a bad numerics variable, said once here rather than as a run's traceback
        precision(), adam_kernel()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    configure_console_logging()


@main.command(context_settings={"ignore_unknown_options": False})
@click.argument("recipe")
@click.argument("overrides", nargs=-1)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for results.json, results.md, plots, TensorBoard scalars and logs "
    "(default: runs/<recipe>-<timestamp>).",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="YAML file with the recipe's configuration; key=value arguments override it.",
)
@click.option("--quiet", is_flag=True, help="No progress bar (the results table is still printed).")
def run(
    recipe: str, overrides: tuple[str, ...], out: Path | None, config_file: str | None, quiet: bool
) -> None:
    """Run RECIPE in embedded mode (every service in this process).

    OVERRIDES are key=value pairs of the recipe's configuration, e.g.
    `llmrl run evaluate env=SimpleDoorKey planner=oracle episodes=20`.
    `llmrl recipes RECIPE` lists the recipe's keys.
    """
    run_embedded = _load("llmrl.orchestrator.embedded", "run_embedded")
    run_failed = _load("llmrl.orchestrator.embedded", "RunFailed")
    config_error = _load("llmrl.recipes.config", "ConfigError")
    config = _settings(config_file, overrides)
    _allow_working_folder()
    try:
        run_embedded(recipe, config, out_dir=out, progress=not quiet)
    except config_error as exc:  # unknown recipe or bad key/value: say which, no traceback
        raise click.UsageError(str(exc)) from exc
    except run_failed as exc:  # a phase raised: its error, already logged, without a traceback
        raise click.ClickException(
            f"{exc}\nThe run's log and stored phases are in {exc.out}; change what the error "
            "names (`llmrl recipes RECIPE` lists the recipe's keys) and run the command again."
        ) from exc
    except KeyboardInterrupt:
        click.echo("\ninterrupted: run it again with the same --out DIR to resume", err=True)
        sys.exit(130)


@main.command()
@click.argument("service", type=click.Choice(list(SERVICE_MODULES)))
@click.option(
    "--host", default=None, help="Interface to bind (default 127.0.0.1, or LLMRL_<SERVICE>_HOST)."
)
@click.option("--port", type=int, default=None, help="HTTP port: REST API, /health, /metrics.")
@click.option("--grpc-port", type=int, default=None, help="gRPC port (simulator and llm_gateway).")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="YAML file with the service's settings.",
)
@click.option(
    "--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override one setting (repeatable)."
)
def serve(
    service: str,
    host: str | None,
    port: int | None,
    grpc_port: int | None,
    config_file: str | None,
    sets: tuple[str, ...],
) -> None:
    """Run one SERVICE in the foreground until Ctrl-C or SIGTERM.

    \b
    simulator: dm_env_rpc on --grpc-port; on --port /health, /metrics and every
    registered env over OpenEnv's protocol (HTTP /reset /step /state /schema and
    WebSocket sessions) at http://HOST:PORT/openenv/<env>, e.g.
    GenericEnvClient(base_url="http://127.0.0.1:8004/openenv/BabyAIText-GoToLocal").
    Sessions need the token (LLMRL_TOKEN) and count against max_connections and
    max_envs_total; --set openenv=false turns them off. See docs/operations/openenv.md.
    """
    serve_fn = _load(SERVICE_MODULES[service], "serve")
    serve_fn(
        host=host or cfg.service_host(service),
        port=port or cfg.service_port(service),
        grpc_port=grpc_port
        or (cfg.service_grpc_port(service) if cfg.DEFAULT_PORTS[service].grpc else None),
        settings=_settings(config_file, sets, hint="--set"),
    )


@main.command()
@click.option(
    "--redis-url", default=None, help="Redis holding the episode queue (default LLMRL_REDIS_URL)."
)
@click.option(
    "--simulator",
    default=None,
    help="Simulator gRPC address host:port, or 'local' for in-process worlds.",
)
@click.option(
    "--llm-gateway",
    default=None,
    help="LLM gateway gRPC address host:port, or 'local' for an in-process gateway.",
)
@click.option(
    "--name", default=None, help="Consumer name in the queue's group (default: host-pid)."
)
@click.option(
    "--port", type=int, default=None, help="HTTP port for /health and /metrics (0: none)."
)
def worker(
    redis_url: str | None,
    simulator: str | None,
    llm_gateway: str | None,
    name: str | None,
    port: int | None,
) -> None:
    """Run one rollout worker: pull episode jobs, step the simulator, call the gateway."""
    worker_main = _load("llmrl.orchestrator.worker", "main")
    worker_main(
        redis_url=redis_url or cfg.redis_url(),
        simulator=simulator or cfg.grpc_address("simulator"),
        llm_gateway=llm_gateway or cfg.grpc_address("llm_gateway"),
        name=name,
        port=cfg.service_port("worker") if port is None else port,
    )


@main.command()
@click.option("--workers", type=int, default=2, show_default=True, help="Rollout workers to start.")
@click.option("--redis-url", default=None, help="Use this Redis instead of starting one.")
@click.option(
    "--home",
    type=click.Path(file_okay=False),
    default=None,
    help="Artifact directory (LLMRL_HOME).",
)
@click.option(
    "--redis-port",
    type=int,
    default=None,
    help="Port of the Redis that `up` starts (default 6379 when free, else a free port).",
)
def up(workers: int, redis_url: str | None, home: str | None, redis_port: int | None) -> None:
    """Start every service as a local process (real gRPC, real Redis); Ctrl-C stops them all."""
    up_fn = _load("llmrl.orchestrator.launcher", "up")
    up_fn(workers=workers, redis_url=redis_url, home=home, redis_port=redis_port)


@main.command()
@click.argument("recipe")
@click.argument("overrides", nargs=-1)
@click.option("--url", default=None, help="Orchestrator base URL (default LLMRL_ORCHESTRATOR_URL).")
@click.option("--wait", is_flag=True, help="Follow the run until it ends and print its results.")
def submit(recipe: str, overrides: tuple[str, ...], url: str | None, wait: bool) -> None:
    """Start RECIPE on the orchestrator (service mode); prints the run id."""
    client = _load("llmrl.orchestrator.rest_client", "cli_submit")
    client(recipe, _settings(None, overrides), url=url or cfg.http_url("orchestrator"), wait=wait)


@main.command()
@click.argument("run_id", required=False)
@click.option("--url", default=None, help="Orchestrator base URL (default LLMRL_ORCHESTRATOR_URL).")
def status(run_id: str | None, url: str | None) -> None:
    """Show one run or experiment (or all of them) on the orchestrator."""
    client = _load("llmrl.orchestrator.rest_client", "cli_status")
    client(run_id, url=url or cfg.http_url("orchestrator"))


@main.command()
@click.argument("run_id")
@click.option("--url", default=None, help="Orchestrator base URL (default LLMRL_ORCHESTRATOR_URL).")
def cancel(run_id: str, url: str | None) -> None:
    """Cancel a run, or an experiment's queued and running runs, on the orchestrator."""
    client = _load("llmrl.orchestrator.rest_client", "cli_cancel")
    client(run_id, url=url or cfg.http_url("orchestrator"))


@main.command(context_settings={"ignore_unknown_options": False})
@click.argument("recipe", required=False)
@click.argument("arguments", nargs=-1)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="An experiment file (services/recipes/<recipe>/experiments/<name>.yaml: recipe, "
    "config, grid, seeds, and the claim it checks) instead of RECIPE; ARGUMENTS override it.",
)
@click.option(
    "--name",
    default=None,
    help="Experiment name (letters, digits, '.', '_', '-'); default: the recipe and a digest "
    "of the sweep, so the same sweep gets the same name and resumes.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Embedded: directory for the run store, every run's files and the report "
    "(default: runs/<name>); the same sweep into the same directory resumes.",
)
@click.option(
    "--url",
    default=None,
    help="Submit to this orchestrator (service mode) instead of running here; "
    "`llmrl status <experiment id>` follows it.",
)
@click.option(
    "--max-parallel",
    type=click.IntRange(1, 256),
    default=None,
    help="Service mode: runs at once (default 2); embedded runs go one after another "
    "unless --jobs says otherwise.",
)
@click.option(
    "--jobs",
    type=click.IntRange(1, 256),
    default=1,
    show_default=True,
    help="Embedded: runs at once, each in a process of its own (about one per CPU core); "
    "1 runs them one after another in this process. Results are the same either way.",
)
@click.option(
    "--threads",
    type=click.IntRange(1, 256),
    default=None,
    help="Embedded: torch threads of every run (OMP_NUM_THREADS too), over the experiment "
    "file's `threads`. Unstated: $OMP_NUM_THREADS, else this machine's cores (the sweep says "
    "which); a seeded figure can depend on the count.",
)
@click.option("--wait", is_flag=True, help="With --url: follow the experiment until it ends.")
@click.option("--quiet", is_flag=True, help="Embedded: no progress bars (with --jobs: no lines).")
def sweep(
    recipe: str | None,
    arguments: tuple[str, ...],
    config_file: Path | None,
    name: str | None,
    out: Path | None,
    url: str | None,
    max_parallel: int | None,
    jobs: int,
    threads: int | None,
    wait: bool,
    quiet: bool,
) -> None:
    """Run an experiment: RECIPE over a grid of config values and several seeds.

    ARGUMENTS are key=value pairs: a value in [...] is a grid axis (every combination of
    the axes is a config), `seeds=a..b` (inclusive) or `seeds=[0,3,7]` the seeds of every
    config, anything else fixed for all runs; a list-valued key is fixed with `key=[[a,b]]`.
    E.g. `llmrl sweep evaluate planner=[oracle] episodes=[5,10] seeds=0..4`, or
    `llmrl sweep --config services/recipes/when2ask/experiments/quick.yaml`. The report
    (results.md, results.json, plots: mean, 95% bootstrap interval and IQM over seeds) is
    written to the out dir; `llmrl compare` builds the same from any runs.
    """
    config_error = _load("llmrl.recipes.config", "ConfigError")
    spec_from_arguments = _load("llmrl.orchestrator.experiments", "spec_from_arguments")
    if url is None:
        _allow_working_folder()
    elif threads is not None:  # (a file's own `threads` is for its embedded runs: no error)
        raise click.UsageError(
            "--threads: embedded sweeps only; a service's runs compute on its own "
            "OMP_NUM_THREADS (set it where the services start)"
        )
    try:
        if config_file is not None:
            load_experiment = _load("llmrl.orchestrator.experiment_files", "load_experiment")
            given = (recipe, *arguments) if recipe else arguments  # all key=value pairs
            experiment = load_experiment(config_file, given)
            gateway, threads = experiment.gateway, threads or experiment.threads
            spec = experiment.spec()
            if name is not None or max_parallel is not None:
                changes = {"name": name, "max_parallel": max_parallel}
                spec = spec.model_copy(update={k: v for k, v in changes.items() if v})
        elif recipe is None:
            raise click.UsageError("name a RECIPE, or an experiment file with --config FILE")
        else:
            gateway = None
            spec = spec_from_arguments(recipe, arguments, name=name, max_parallel=max_parallel)
        if url is not None:
            submit = _load("llmrl.orchestrator.rest_client", "cli_submit_experiment")
            submit(spec.model_dump(mode="json", exclude_none=True), url=url, wait=wait)
            return
        run_sweep = _load("llmrl.orchestrator.sweep", "run_sweep")
        run_sweep(
            spec, out_dir=out, progress=not quiet, jobs=jobs, gateway=gateway, threads=threads
        )
    except config_error as exc:  # the field and why; nothing was started
        raise click.UsageError(str(exc)) from exc
    except KeyboardInterrupt:
        click.echo("\ninterrupted: run the same sweep again (same --out) to resume", err=True)
        sys.exit(130)


@main.command()
@click.argument("references", nargs=-1, required=True)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("runs/comparison"),
    show_default=True,
    help="Directory for the report: results.md, results.json, curves.png, headline.png.",
)
@click.option(
    "--url",
    default=None,
    help="Look the ids up on this orchestrator (run and experiment ids) instead of locally.",
)
@click.option("--title", default=None, help="Title of the report (default: what was compared).")
def compare(references: tuple[str, ...], out: Path, url: str | None, title: str | None) -> None:
    """Compare runs over seeds: mean, 95% bootstrap interval and IQM per method.

    REFERENCES are run directories (an `llmrl run --out` or `llmrl sweep --out`
    directory), run or experiment ids of this machine's embedded runs and sweeps and of its
    orchestrator's store (under LLMRL_HOME), or with --url ids on that orchestrator. Runs
    of one recipe whose configs differ only in seed are seeds of one config.
    """
    compare_cli = _load("llmrl.orchestrator.compare_cli", "cli_compare")
    compare_cli(list(references), out, url=url, title=title)


@main.group()
def results() -> None:
    """Reported figures as data: keep an experiment's report beside its file, and render the
    docs' results tables from the kept reports."""


@results.command("keep")
@click.argument("out_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("experiment_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--partial",
    is_flag=True,
    help="Keep the runs done so far although some planned runs are missing (the report says "
    "which); a later keep of another out dir adds its runs to them.",
)
def results_keep(out_dir: Path, experiment_file: Path, partial: bool) -> None:
    """Store the report of EXPERIMENT_FILE's runs found in OUT_DIR (the sweep's --out) as
    <name>.results.json beside the file: every run the file plans must be there (in OUT_DIR
    or kept before), completed, with the same config. An experiment run in parts, e.g. one
    seed per machine or sitting (`llmrl sweep --config FILE seeds=[1] --out DIR`), is kept
    with --partial until its last part. Then `llmrl results render` puts it on the recipe's
    docs page."""
    keep = _load("llmrl.orchestrator.stored_results", "keep")
    config_error = _load("llmrl.recipes.config", "ConfigError")
    try:
        path = keep(out_dir, experiment_file, partial=partial)
    except config_error as exc:
        raise click.UsageError(str(exc)) from exc
    click.echo(f"kept {path}")


@results.command("check")
@click.argument("out_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("experiment_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def results_check(out_dir: Path, experiment_file: Path) -> None:
    """Whether this machine gave EXPERIMENT_FILE's kept rows again: each run of its kept
    report against the run of the same config in OUT_DIR (the --out of `llmrl sweep --config
    EXPERIMENT_FILE`), cell by cell, measured columns (time on the machine) aside. Prints
    where each side ran (CPU, precision, pinned CPU paths) and the differing cells; exit 0
    when every run matched, 1 otherwise."""
    from rich.table import Table
    from rich.text import Text

    check = _load("llmrl.orchestrator.repeat_check", "check_against_kept")
    config_error = _load("llmrl.recipes.config", "ConfigError")
    try:
        checks = check(out_dir, experiment_file)
    except config_error as exc:
        raise click.UsageError(str(exc)) from exc
    table = Table(title=f"{experiment_file}: kept rows against {out_dir}")
    for column in ("run", "rows", "same rows"):
        table.add_column(column, overflow="fold")
    for run in checks:
        verdict = "not run here" if run.here_on is None else "yes" if run.same else "no"
        table.add_row(*(Text(cell) for cell in (run.run_id, str(run.rows), verdict)))
    console = _load("llmrl.common.console", "output_console")()
    console.print(table)
    # where each side ran: usually one machine per side, so said once, not per row
    for side, places in (
        ("kept on", [r.kept_on for r in checks]),
        ("here on", [r.here_on for r in checks]),
    ):
        for place in dict.fromkeys(p for p in places if p):
            console.print(Text(f"{side}: {place}"))
    for run in checks:
        for line in run.differences:
            console.print(Text(f"{run.run_id}: {line}"))
    if not all(run.same for run in checks if run.here_on is not None):
        sys.exit(1)


@results.command("list")
@click.argument("recipe", required=False)
@click.option(
    "--history",
    is_flag=True,
    help="Also the research notes' experiment files (research/<recipe>/experiments/ of the "
    "repository checkout llmrl runs from; an installed wheel has none), each with the commit "
    "whose config schema reads it.",
)
def results_list(recipe: str | None, history: bool) -> None:
    """Each reported experiment file (of RECIPE, e.g. llm_personalize or llm-personalize)
    with its stored report: runs kept of those it plans, when kept, and the seeds still to
    run (`llmrl sweep --config FILE seeds=[...]`, then `llmrl results keep --partial`)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    files = _load("llmrl.orchestrator.experiment_files", "experiment_files")
    state = _load("llmrl.orchestrator.stored_results", "experiment_state")
    package = recipe.replace("-", "_") if recipe else None
    paths = files(package)
    if not paths:
        raise click.UsageError(f"no experiment files for recipe {recipe!r}; see `llmrl recipes`")
    table = Table(title="experiment files and their stored reports")
    table.add_column("file", no_wrap=True)
    for column in ("runs kept", "kept on", "seeds to run", "budget", "min/run kept"):
        table.add_column(column, overflow="fold")
    for path in paths:
        row = state(path)
        budget = (row["budget"] or "").split(" (")[0]  # its figure; the file says how measured
        cells = [
            row["file"].removeprefix("services/recipes/").replace("/experiments/", "/"),
            f"{row['kept_runs']} of {row['planned']}",
            row["kept"] or "-",
            ",".join(map(str, row["seeds_to_run"])) or "-",
            budget,
            "-" if row["minutes_per_run"] is None else str(row["minutes_per_run"]),
        ]
        table.add_row(*(Text(cell) for cell in cells))  # Text: a [..] in a cell is no markup
    console = Console(width=max(150, Console().width))
    console.print(table)
    if history:
        console.print(_history_table(package))


def _history_table(package: str | None) -> Any:
    """The research notes' experiment files: not planned here, for today's config schema need
    not read them, only listed with the commit to run each at (research/README.md)."""
    from rich.table import Table
    from rich.text import Text

    module = "llmrl.orchestrator.experiment_files"
    history_files = _load(module, "history_files")
    research_dir = _load(module, "RESEARCH_DIR")
    commit_of = _load(module, "history_commit")
    paths = history_files(package)
    table = Table(title=f"history experiment files ({research_dir}): run each at its commit")
    table.add_column("file", no_wrap=True)
    table.add_column("commit", no_wrap=True)
    for path in paths:
        commit = commit_of(path)
        cells = [str(path.relative_to(research_dir)).replace("/experiments/", "/"), commit or "-"]
        table.add_row(*(Text(cell) for cell in cells))
    if not paths:
        table.add_row(Text("none here (an installed llmrl has no research/ folder)"), Text("-"))
    return table


@results.command("render")
@click.option(
    "--check",
    is_flag=True,
    help="Change nothing; exit 1 if a docs page's results section differs from its reports.",
)
def results_render(check: bool) -> None:
    """Write each recipe page's results section (docs/recipes/<recipe>.md, between the
    results markers) from the kept reports (services/recipes/*/experiments/*.results.json)."""
    render = _load("llmrl.orchestrator.stored_results", "render")
    changed = render(check=check)
    for page in changed:
        click.echo(f"{'differs' if check else 'rendered'}: {page}")
    if check and changed:
        raise click.ClickException(
            "the docs' results tables differ from the kept reports: run `llmrl results render`"
        )
    if not changed:
        click.echo("every results section matches its kept reports")


@main.group()
def data() -> None:
    """The benchmark data llmrl reads but does not ship (Housekeep, KALM): get a copy,
    verified against its checksums, and see where llmrl finds each."""


@data.command("get")
@click.argument("name", type=click.Choice(sorted(datasets.DATASETS)))
@click.option(
    "--from",
    "source",
    metavar="URL_OR_DIR",
    default=None,
    help="An http(s) base URL (each file's path is appended) or a local folder laid out like "
    "the dataset (e.g. an unpacked download). Default: the dataset's own source; Housekeep has "
    "none, since its project publishes one archive.",
)
@click.option(
    "--to",
    "destination",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder to write the dataset into (default: $LLMRL_HOME/data/NAME, where llmrl finds "
    "it without a variable).",
)
def data_get(name: str, source: str | None, destination: Path | None) -> None:
    """Get dataset NAME into a folder: every file is checked against its size and SHA-256
    before it is put in place, files already there and right are kept, and a failure leaves
    nothing half-written. Then says which variable to set, if any."""
    fetch = _load("llmrl.common.data_fetch", "fetch_dataset")
    fetch_error = _load("llmrl.common.data_fetch", "FetchError")
    advice = _load("llmrl.common.data_fetch", "variable_advice")
    dataset = datasets.DATASETS[name]  # looked up now: a test may put its own dataset there
    try:
        report = fetch(dataset, source, destination, progress=click.echo)
    except fetch_error as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(
        f"{name}: {len(report.fetched)} fetched, {len(report.present)} already present "
        f"in {report.destination}"
    )
    for line in advice(dataset, report.destination):
        click.echo(line)


@data.command("list")
def data_list() -> None:
    """Each dataset: its variable, where llmrl finds it now (or how to get it), and where the
    data comes from."""
    incomplete = _load("llmrl.common.data_fetch", "incomplete_files")
    for name, dataset in datasets.DATASETS.items():
        folder = datasets.dataset_dir(name)
        if folder is None:
            found = f"not found: {datasets.missing_hint(name)}"
        else:
            missing = incomplete(dataset, folder)
            found = str(folder)
            if missing:
                found += f" (incomplete: absent or of the wrong size: {', '.join(missing)})"
        click.echo(f"{name} (${dataset.env_var})")
        click.echo(f"  found:  {found}")
        click.echo(f"  source: {dataset.source_note}")


@main.group(invoke_without_command=True)
@click.option(
    "--url",
    default=None,
    help="List this orchestrator's runs (GET /runs) instead of the runs stored under LLMRL_HOME.",
)
@click.pass_context
def runs(ctx: click.Context, url: str | None) -> None:
    """List stored runs: recipe, status, key config, headline metric, LLM spend.

    Without --url: the embedded runs and sweeps run on this machine (catalogued in
    LLMRL_HOME/embedded.sqlite) and the local orchestrator's runs. `llmrl runs export RUN
    --out FILE` bundles one run's LLM calls for `llmrl replay`.
    """
    if ctx.invoked_subcommand is None:
        compare_cli = _load("llmrl.orchestrator.compare_cli", "cli_runs")
        compare_cli(url)


@runs.command("export")
@click.argument("run")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The bundle file to write (gzip-compressed JSON, e.g. run.llmrl.json.gz).",
)
@click.option(
    "--gateway-config",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="The gateway settings whose ledger kept the run's calls (default: "
    "$LLMRL_LLM_GATEWAY_CONFIG, else the built-in ones: the ledger under LLMRL_HOME).",
)
def runs_export(run: str, out: Path, gateway_config: str | None) -> None:
    """Bundle RUN for `llmrl replay` on another machine: its recipe and config, its
    results.json, the gateway settings it ran with and every LLM call of it with its answer.

    RUN is a run id (`llmrl runs` lists them) or a run's --out directory (or a sweep's
    DIR/runs/<run_id>). The run must have completed on a gateway that kept its calls
    (ledger.record_calls, on by default).
    """
    export_run = _load("llmrl.orchestrator.replay", "export_run")
    bundle_error = _load("llmrl.llm_gateway.replay_bundle", "BundleError")
    unknown = _load("llmrl.orchestrator.sources", "UnknownReference")
    try:
        report = export_run(run, out, gateway_config=gateway_config)
    except unknown as exc:
        raise click.UsageError(str(exc)) from exc
    except bundle_error as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(
        f"run {report.run_id} ({report.recipe}): {report.calls} LLM calls kept for its "
        f"{report.requests} requests, {report.size / 2**20:.2f} MiB, in {report.path}"
    )
    if report.sampled:
        click.echo(
            f"{report.sampled} of them were sampled without a seed: a replay serves their "
            "answers in the order recorded"
        )


@main.command()
@click.argument("bundle", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for the replayed run's files, as `llmrl run --out` "
    "(default: runs/replay-<recorded run id>).",
)
@click.option("--quiet", is_flag=True, help="No progress bar (the results table is still printed).")
@click.option(
    "--recompute",
    is_flag=True,
    help="Answer every LLM call with this machine's own models instead of the bundle, then "
    "compare each answer's bits with the bundle's answer to the same request: whether this "
    "machine computes the run's LLM answers as the recording one did. Run it in a fresh "
    "LLMRL_HOME, so that no answer comes from this machine's cache.",
)
def replay(bundle: Path, out: Path | None, quiet: bool, recompute: bool) -> None:
    """Run a bundle (`llmrl runs export`) again here with no model: every LLM call is answered
    from the bundle, and a call it lacks fails the run naming it. Then compare each row of the
    new results.json with the recorded one: exit 0 when identical, 1 listing the first
    differing cells. With --recompute, this machine's models answer, and each answer is
    compared with the recorded one too.

    A bundle is untrusted input: it is refused if it is too large, not JSON, fails the
    schema, names an unregistered recipe or a path in its config.
    """
    run_replay = _load("llmrl.orchestrator.replay", "replay")
    bundle_error = _load("llmrl.llm_gateway.replay_bundle", "BundleError")
    run_failed = _load("llmrl.orchestrator.embedded", "RunFailed")
    try:
        report = run_replay(bundle, out_dir=out, progress=not quiet, recompute=recompute)
    except bundle_error as exc:
        raise click.ClickException(str(exc)) from exc
    except run_failed as exc:
        raise click.ClickException(f"the replay failed: {exc}") from exc
    if report.answers is not None:
        _echo_answer_check(report.answers)
    if report.identical:
        click.echo(f"identical: every cell of the {report.rows} rows is the recorded run's")
        return
    if report.differences:
        click.echo("differs from the recorded run:", err=True)
    for line in report.differences:
        click.echo(f"  {line}", err=True)
    if not report.differences:
        click.echo(f"every cell of the {report.rows} rows is the recorded run's", err=True)
    sys.exit(1)


def _echo_answer_check(answers: Any) -> None:
    """`llmrl replay --recompute`'s line on the LLM answers, and the first that differ."""
    same = answers.compared - answers.differing_count
    click.echo(
        f"LLM answers: {same} of {answers.compared} requests answered here with the recorded "
        f"bits; {answers.differing_count} differ"
    )
    for line in answers.differing:
        click.echo(f"  {line}")
    if answers.only_recorded or answers.only_here:
        click.echo(
            f"  {answers.only_recorded} recorded requests not asked here, {answers.only_here} "
            "asked here and not recorded (other code, config, data or model identity)"
        )


@main.group()
def numerics() -> None:
    """The numerics runs compute with here: the bits of the ops their figures go through."""


@numerics.command("fingerprint")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write this machine's fingerprint (JSON) to this file.",
)
@click.option(
    "--against",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A fingerprint written on another machine: list each op with whether its bits are "
    "the same here, and exit 1 if any differs.",
)
@click.option(
    "--no-models",
    is_flag=True,
    help="Leave out the local models (SmolLM2's weights, logits and gradients, MiniLM's "
    "embeddings): the kernels only, in seconds.",
)
def numerics_fingerprint(out: Path | None, against: Path | None, no_models: bool) -> None:
    """Digest the output of each op llmrl's runs compute with (GEMMs, attention, element-wise
    and reduction kernels, convolutions, Adam, numpy's BLAS, the local models' weights, logits,
    gradients and embeddings) on fixed inputs, under this process's precision, CPU path pins
    and threads. Two machines whose digests differ for an op compute it to other bits there:
    runs going through that op cannot repeat bit for bit across them."""
    import json

    from rich.table import Table
    from rich.text import Text

    module = "llmrl.orchestrator.numerics_fingerprint"
    there, differing = None, []
    if against is not None:
        try:
            there = _load(module, "read_fingerprint")(against)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from exc
    here = _load(module, "fingerprint")(models=not no_models)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(here, indent=1) + "\n")
    console = _load("llmrl.common.console", "output_console")()
    if there is None:
        table = Table(title=f"numerics fingerprint: {here['cpu']}")
        table.add_column("op")
        table.add_column("digest", no_wrap=True)
        for name, value in here["ops"].items():
            table.add_row(Text(name), Text(value))
        console.print(table)
    else:
        rows = _load(module, "compare")(here, there)
        sides = [f"{d.get('cpu', '?')} ({' '.join(d.get('isa', []))})" for d in (here, there)]
        table = Table(title=f"here: {sides[0]}; there: {sides[1]}")
        for column in ("op", "here", "there", "same bits"):
            table.add_column(column, no_wrap=column != "op")
        verdicts = {True: "yes", False: "no", None: "not compared"}
        for name, mine, theirs, same in rows:
            table.add_row(Text(name), Text(mine), Text(theirs), Text(verdicts[same]))
        console.print(table)
        compared = [row for row in rows if row[3] is not None]
        differing = [row[0] for row in compared if not row[3]]
        console.print(
            f"{len(compared) - len(differing)} of {len(compared)} ops compared give the same "
            "bits" + (f"; differ: {', '.join(differing)}" if differing else "")
        )
    if out is not None:
        console.print(f"wrote {out}")
    if differing:
        sys.exit(1)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
def trust(paths: tuple[Path, ...]) -> None:
    """Vouch for model files llmrl did not save here (a checkpoint from another machine).

    Stable-Baselines3 zips, d3rlpy models and other pickle-based files run code when loaded,
    so llmrl loads only files it saved under LLMRL_HOME (their digests are recorded in
    LLMRL_HOME/trusted). PATHS (files, or checkpoint folders: every file in them) are recorded
    the same way; trust only files whose origin you know. No service offers this over its API.
    """
    from llmrl.common import trusted

    for path in paths:
        digests = trusted.record_tree(path) if path.is_dir() else [trusted.record(path)]
        click.echo(f"trusted {path} ({len(digests)} file{'s' * (len(digests) != 1)})")


@main.command()
@click.option(
    "--print",
    "print_only",
    is_flag=True,
    help="Only print the command (with the log root) instead of starting TensorBoard.",
)
@click.option("--port", type=int, default=None, help="TensorBoard's port (default its own, 6006).")
def tensorboard(print_only: bool, port: int | None) -> None:
    """TensorBoard over every run: one log root, LLMRL_HOME/tensorboard/<run_id>."""
    compare_cli = _load("llmrl.orchestrator.compare_cli", "cli_tensorboard")
    compare_cli(print_only, port)


def _print_entries(kind: str) -> None:
    """A table of the registered entries of `kind`, each with whether it can be used here
    (else what to install), then the modules left out for a missing package."""
    from rich.table import Table
    from rich.text import Text

    from llmrl.common.console import output_console
    from llmrl.common.registry import registry

    try:
        entries = registry.entries(kind)  # type: ignore[arg-type]
        unloaded = registry.unloaded_modules(kind)  # type: ignore[arg-type]
    except ImportError as exc:  # e.g. LLMRL_PLUGINS names a module that does not exist
        raise click.ClickException(str(exc)) from exc
    table = Table(title=f"registered {kind}s")
    table.add_column("name")
    table.add_column("available")
    table.add_column("description")
    for entry in entries.values():
        available = "yes" if entry.available else f"no: {entry.install_hint}"
        table.add_row(entry.name, Text(available), entry.description)  # Text: no markup
    console = output_console()
    console.print(table)
    if unloaded:
        left_out = Table(title=f"modules not loaded: their {kind}s are not listed above")
        for column in ("module", "missing package", "install"):
            left_out.add_column(column)
        for module in unloaded:
            left_out.add_row(module.module, module.missing, Text(module.install_hint))
        console.print(left_out)


@main.command()
def envs() -> None:
    """List the registered environments (ids for CreateWorld and gymnasium.make), whether
    each can be made here, and what to install for those that cannot."""
    _print_entries("env")


@main.command()
@click.argument("names", nargs=-1, metavar="[RECIPE]...")
def recipes(names: tuple[str, ...]) -> None:
    """List the registered recipes, what each runs, and their configuration keys.

    With RECIPE names, only those recipes' keys, e.g. `llmrl recipes glam`.
    """
    from llmrl.common.console import output_console

    config_fields = _load("llmrl.recipes.config", "config_fields")
    entries = _named_entries("recipe", names)
    if not names:
        _print_entries("recipe")
    for name, entry in entries.items():
        if names and name not in names:
            continue
        if not entry.available:  # its install hint says what is missing
            if names:
                output_console().print(f"{name}: not available here ({entry.install_hint})")
            continue
        _print_fields(f"{name}: configuration (key=value)", config_fields(name))


@main.command()
@click.argument("names", nargs=-1, metavar="[ALGORITHM]...")
def algorithms(names: tuple[str, ...]) -> None:
    """List the learner's training algorithms (what each learns from) and their settings.

    With ALGORITHM names, only those algorithms' settings, e.g. `llmrl algorithms llm-ppo`:
    the keys a policy job or a recipe passes on, each with its type, default and meaning.
    """
    from llmrl.common.model_fields import field_rows

    entries = _named_entries("algorithm", names)
    if not names:
        _print_entries("algorithm")
    for name, entry in entries.items():
        model = getattr(entry.obj, "settings_model", None)
        if (names and name not in names) or model is None:
            continue
        _print_fields(f"{name}: settings", field_rows(model))


def _named_entries(kind: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """The registry's entries of `kind`; a usage error naming any of `names` it lacks."""
    from llmrl.common.registry import registry

    try:
        entries = registry.entries(kind)
    except ImportError as exc:  # e.g. LLMRL_PLUGINS names a module that does not exist
        raise click.ClickException(str(exc)) from exc
    unknown = [name for name in names if name not in entries]
    if unknown:
        raise click.UsageError(
            f"unknown {kind} {', '.join(map(repr, unknown))}; registered: {', '.join(entries)}"
        )
    return entries


def _print_fields(title: str, rows: list[dict[str, str]]) -> None:
    """A table of settings: key, type, default and description (`model_fields.field_rows`)."""
    from rich.table import Table
    from rich.text import Text

    from llmrl.common.console import output_console

    table = Table(title=title)
    for column in ("key", "type", "default", "description"):
        table.add_column(column)
    for row in rows:  # as text, not rich markup: `llmrl[tracking]`, `[a, b]` show as written
        table.add_row(*(Text(row[key]) for key in ("name", "type", "default", "description")))
    output_console().print(table)


@main.command()
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Gateway YAML configuration to read (default: built-in models).",
)
def models(config_file: str | None) -> None:
    """List the LLM backends and the models the gateway is configured with."""
    _print_entries("backend")
    list_models = _load("llmrl.llm_gateway.settings", "print_models")
    list_models(config_file)


if __name__ == "__main__":
    sys.exit(main())
