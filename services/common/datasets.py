"""The benchmark datasets llmrl reads but does not ship: what each holds, and where it is found.

Housekeep's episodes and annotations (Kant et al., 2022) and KALM's released trajectories (Pang
et al., 2024) are not part of the repository or the package. A user gets them with
`llmrl data get NAME` (`llmrl.common.data_fetch`), which writes them under
`$LLMRL_HOME/data/NAME`, or points the dataset's variable at a copy they already have. Every
reader asks `dataset_dir(NAME)`: the variable when it is set, else the copy under LLMRL_HOME,
else None, so that nothing depends on one machine's folder layout. `missing_hint` is the one
sentence every "no data" error and test skip ends with.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmrl.common.config import home_dir


@dataclass(frozen=True)
class DataFile:
    """One file of a dataset: its path inside the dataset's folder, size and SHA-256."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Dataset:
    """A dataset llmrl knows: the variable that points at a copy, the file whose presence marks
    a usable copy, its files with checksums, and where it is published."""

    name: str
    env_var: str
    marker: str  # a folder holding this file is taken for a copy of the dataset
    files: tuple[DataFile, ...]
    source: str | None  # base URL the files' paths are appended to; None: no per-file source
    source_note: str  # where the data comes from, for humans (licence included)


HOUSEKEEP = Dataset(
    name="housekeep",
    env_var="LLMRL_HOUSEKEEP_DATA",
    marker="data.npy",
    files=(
        DataFile(
            "data.npy", 2788628, "40d083e88eaf4d2eee644c35525c48c44668626f409dd7e76bf99f64aba8f2ca"
        ),
        DataFile(
            "splits.yaml", 5140, "f165ec11c3ab30000c132ddbe57263f70184d7923d1e6396fcabbdd74e7c7872"
        ),
        DataFile(
            "episodes/train/Benevolence_2_int.json.gz",
            1618431,
            "f50a455069314ef5a6757cc29a505ae1423d99c0ce98cd50826d2fb82a100e83",
        ),
        DataFile(
            "episodes/train/Pomaria_0_int.json.gz",
            1995606,
            "e58525e8989d7a2c0cfdcec4f670dd9c52c43d6ef4382cc32ec86f419064d4cf",
        ),
        DataFile(
            "episodes/train/Pomaria_2_int.json.gz",
            1543632,
            "76e9a1564a13a74357ee06db5a9a161e5f0928ff03f08d655fd0f4413512ee74",
        ),
        DataFile(
            "episodes/val/Ihlen_1_int.json.gz",
            2034038,
            "419bc8e56cafd752f5ec142c6e9c7b136cdf341c8a3ef9bc5cc6c2f438cddb56",
        ),
        DataFile(
            "episodes/val/Merom_1_int.json.gz",
            1887760,
            "abb55094c0d5c20f2e6833344c246aafbf1b2f5075476efe7a733b26b45b664c",
        ),
    ),
    # The Housekeep project publishes its episodes as one download described in its repository
    # (github.com/yashkant/housekeep, data/README.md), not file by file: unpack it, lay it out
    # as above, and copy it in with --from DIR (or serve such a folder and give its URL).
    source=None,
    source_note="the Housekeep benchmark (Kant et al., 2022; MIT licence), "
    "https://github.com/yashkant/housekeep: its human annotations (data.npy), scene splits and "
    "the episodes of the scenes llmrl's experiments use (train: Benevolence_2_int, "
    "Pomaria_0_int, Pomaria_2_int; val: Ihlen_1_int, Merom_1_int)",
)

KALM = Dataset(
    name="kalm",
    env_var="LLMRL_KALM_DATA",
    marker="clevr_robot.npy",
    files=(
        DataFile(
            "clevr_robot.npy",
            2955621,
            "546f04c70f06fa9e9a084c9adb6c5ef2eff97eef5d78f794ef80842ffe0288f2",
        ),
        DataFile(
            "meta_world.npy",
            1601150,
            "efbfa2aa1746d46ced56c4d328473265ad2f5b6cf7d590777093b06319305644",
        ),
    ),
    source="https://raw.githubusercontent.com/CharlieBrown-v1/KALM/main/data/",
    source_note="KALM's released toy datasets (Pang et al., NeurIPS 2024), the data/ folder of "
    "https://github.com/CharlieBrown-v1/KALM (no licence file: for research use)",
)

DATASETS: dict[str, Dataset] = {d.name: d for d in (HOUSEKEEP, KALM)}


def default_location(dataset: Dataset) -> Path:
    """Where `llmrl data get` writes a dataset when no --to is given: $LLMRL_HOME/data/NAME."""
    return home_dir() / "data" / dataset.name


def dataset_dir(name: str) -> Path | None:
    """The folder holding dataset `name`: its variable when set (whether or not the folder is
    complete: a reader then says what is missing there), else the copy under LLMRL_HOME when
    it holds the marker file, else None."""
    dataset = DATASETS[name]
    configured = os.environ.get(dataset.env_var)
    if configured:
        return Path(configured).expanduser()
    fetched = default_location(dataset)
    return fetched if (fetched / dataset.marker).is_file() else None


def missing_hint(name: str) -> str:
    """How to get dataset `name`: the sentence every "no data" error and test skip ends with."""
    dataset = DATASETS[name]
    return (
        f"get it with `llmrl data get {name}` (it writes $LLMRL_HOME/data/{name}, where llmrl "
        f"finds it; `--from URL_OR_DIR` for a copy you have), or set ${dataset.env_var} to a copy"
    )


def placeholder(dataset: Dataset) -> str:
    """How a kept config writes this machine's copy of `dataset`: its variable, `$NAME`."""
    return f"${dataset.env_var}"


def portable(value: Any) -> Any:
    """`value` (a config, or any part of one) with each string naming the folder where a
    known dataset lies on this machine written as that dataset's `placeholder`.

    Where the data lies is this machine's business, not what a run computed: a run made with
    the Housekeep data in /data/housekeep is the same run as one made with it anywhere else,
    so run identities and kept reports use this form, and a report kept here is matched on a
    machine whose copy lies elsewhere. A folder that is not where llmrl finds the dataset
    (another copy named outright) is kept as written."""
    located = {}
    for dataset in DATASETS.values():
        found = dataset_dir(dataset.name)
        if found is not None:
            located[str(found.resolve())] = placeholder(dataset)
    if not located:
        return value
    return _replace_paths(value, located)


def _replace_paths(value: Any, located: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {key: _replace_paths(item, located) for key, item in value.items()}
    if isinstance(value, list):
        return [_replace_paths(item, located) for item in value]
    if isinstance(value, str) and value.startswith(("/", "~")):
        try:
            return located.get(str(Path(value).expanduser().resolve()), value)
        except (OSError, ValueError, RuntimeError):  # a NUL byte, ~nobody: no data folder
            return value
    return value
