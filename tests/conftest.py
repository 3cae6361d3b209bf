"""Fixtures shared by every test area: the tiny random Llama (built once per session) and the
real Housekeep data (the Housekeep env's and LLM-Personalize's tests)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmrl.common.numerics import pin_cpu_paths

pin_cpu_paths()  # as the `llmrl` command does, before torch loads (support.tiny_llm imports it)

from support.processes import RedisServer  # noqa: E402
from support.tiny_llm import make_tiny_llama  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """LLMRL_HOME in a temporary folder for the whole session: nothing a test forgets to place
    lands in ./.llmrl of the repository (tests that need their own home set it themselves).
    Benchmark data `llmrl data get` wrote under the user's home stays found: its variable is
    set to it first."""
    from llmrl.common.datasets import DATASETS, dataset_dir

    home = tmp_path_factory.mktemp("llmrl-home")
    saved = {name: os.environ.get(name) for name in ("LLMRL_HOME", *_data_variables())}
    for dataset in DATASETS.values():
        if (found := dataset_dir(dataset.name)) is not None:
            os.environ[dataset.env_var] = str(found.resolve())
    os.environ["LLMRL_HOME"] = str(home)
    yield home
    for name, previous in saved.items():
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


def _data_variables() -> list[str]:
    from llmrl.common.datasets import DATASETS

    return [dataset.env_var for dataset in DATASETS.values()]


@pytest.fixture(scope="session", autouse=True)
def temporary_folders_are_data_roots(
    isolated_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Services confine the paths a request names to LLMRL_HOME and LLMRL_DATA_ROOTS: the
    tests' temporary folders join the default roots (services the tests start inherit it).
    The models tests save there load too: they are an artifact root (LLMRL_ARTIFACT_ROOTS,
    where pickles the project saved may be loaded from besides LLMRL_HOME)."""
    from llmrl.common.paths import ARTIFACT_ROOTS_ENV, DATA_ROOTS_ENV, data_roots

    previous = {name: os.environ.get(name) for name in (DATA_ROOTS_ENV, ARTIFACT_ROOTS_ENV)}
    roots = [tmp_path_factory.getbasetemp(), *data_roots()[1:]]  # [0] is LLMRL_HOME, always in
    os.environ[DATA_ROOTS_ENV] = os.pathsep.join(str(root) for root in roots)
    os.environ[ARTIFACT_ROOTS_ENV] = str(tmp_path_factory.getbasetemp())
    yield
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def process_roots_stay_with_their_test() -> Iterator[None]:
    """A folder a test's embedded run allowed (`llmrl run` allows its working folder) is not
    allowed in the tests after it."""
    from llmrl.common import paths

    before = list(paths._process_roots)
    yield
    paths._process_roots[:] = before


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, 32-wide random Llama with SmolLM2's tokenizer and chat template
    (`support.tiny_llm.make_tiny_llama`); serve it with `tiny_gateway_settings`."""
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real Housekeep data; the test is skipped without it, saying how to get it."""
    from support.housekeep import NO_REAL_DATA, real_data_dir

    path = real_data_dir()
    if path is None:
        pytest.skip(NO_REAL_DATA)
    return path


@pytest.fixture(scope="session")
def kalm_data_dir() -> Path:
    """KALM's released data; the test is skipped without it, saying how to get it."""
    from llmrl.common.datasets import dataset_dir, missing_hint
    from llmrl.recipes.kalm.released import CLEVR_FILE

    path = dataset_dir("kalm")
    if path is None or not (path / CLEVR_FILE).is_file():
        pytest.skip(f"needs KALM's released data: {missing_hint('kalm')}")
    return path


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server on a free port, with AOF persistence, for a module's tests."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()
