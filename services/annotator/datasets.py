"""What a dataset builder is, and the pieces builders share: chat examples, files, requests.

A dataset builder turns episode logs (or anything a request names) into a dataset. Recipes
register theirs by name, with the pydantic model of their request:

    @registry.register_dataset("self-training", request=SelfTrainingRequest)
    def self_training(request: SelfTrainingRequest) -> dict[str, Any]: ...

and the annotator service runs them (`POST /datasets/{name}`), so a new kind of data needs no
new endpoint. A builder returns a JSON-ready dict and reports bad input as a `DatasetError`
naming the request field (the service answers 400 with it). Builders of chat fine-tuning data
from episode logs take a `DatasetRequest` and use `build_from_episode_logs`: the dataset is
written as OpenAI chat fine-tuning JSONL plus a statistics JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from llmrl.common.chat_format import write_chat_jsonl
from llmrl.common.episodes import EpisodeRecord, LlmCall, read_jsonl
from llmrl.common.names import Name
from llmrl.common.paths import PathOutsideRootsError, confined_field, data_roots
from llmrl.common.safe_write import write_text


class DatasetRequest(BaseModel):
    """Episode logs in, one dataset out (the request of builders that read episode logs)."""

    model_config = ConfigDict(extra="forbid")

    episodes: list[str] = Field(..., min_length=1, description="episode logs (JSONL files)")
    out_dir: str = Field(..., min_length=1, description="where to write the dataset")
    name: Name = Field("dataset", description="file name stem")

    # a request reads and writes only under LLMRL_HOME or a configured data root
    _paths_confined = field_validator("episodes", "out_dir")(confined_field)


class DatasetError(ValueError):
    """Bad input to a dataset builder: the message starts with the request field it concerns."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass
class ChatExample:
    messages: list[dict[str, Any]]  # the prompt followed by the assistant's target
    source: str  # "<run_id>/<episode_id>#<call index>"
    reward: float = 0.0


@dataclass
class Dataset:
    examples: list[ChatExample]
    stats: dict[str, Any] = field(default_factory=dict)


def prompt_messages(call: LlmCall) -> list[dict[str, Any]]:
    """An LLM call's messages as a fine-tuning prompt; assistant turns inside it (few-shot
    examples) get `"weight": 0`, so fine-tuning trains only on the final answer (OpenAI's
    convention)."""
    messages: list[dict[str, Any]] = []
    for m in call.messages:
        message: dict[str, Any] = {"role": m["role"], "content": m["content"]}
        if m["role"] == "assistant":
            message["weight"] = 0
        messages.append(message)
    return messages


def load_episodes(sources: Iterable[str | Path | EpisodeRecord]) -> list[EpisodeRecord]:
    """Episode records from JSONL logs (paths) and/or records given directly."""
    episodes: list[EpisodeRecord] = []
    for source in sources:
        if isinstance(source, EpisodeRecord):
            episodes.append(source)
        else:
            episodes.extend(read_jsonl(source))
    return episodes


def write_dataset(
    dataset: Dataset, out_dir: str | Path, name: str, roots: Iterable[Path] | None = None
) -> dict[str, str]:
    """Write `<name>.jsonl` (chat fine-tuning format) and `<name>.stats.json` to `out_dir`,
    each created afresh and renamed onto its name, so a link planted at either name (or
    beside it) is replaced, never followed (`llmrl.common.safe_write`). With `roots` (a
    request's `out_dir`) the folder must really lie under one of them when written, else
    `PathOutsideRootsError` on `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data_path, stats_path = out / f"{name}.jsonl", out / f"{name}.stats.json"
    examples = [example.messages for example in dataset.examples]
    write_chat_jsonl(data_path, examples, field="out_dir", roots=roots)
    stats = json.dumps(dataset.stats, indent=2, sort_keys=True) + "\n"
    write_text(stats_path, stats, field="out_dir", roots=roots)
    return {"data": str(data_path), "stats": str(stats_path)}


def build_from_episode_logs(
    request: DatasetRequest, builder: str, make: Callable[[list[EpisodeRecord]], Dataset]
) -> dict[str, Any]:
    """`make` a dataset from the episode logs `request` names and write it where it says.

    Returns `{"data": <jsonl path>, "stats_file": <stats path>, "stats": {...}}`; missing or
    unreadable logs are a `DatasetError` on `episodes`, an unwritable place one on `out_dir`.
    """
    missing = [path for path in request.episodes if not _is_file(path)]
    if missing:
        raise DatasetError("episodes", f"no such file(s): {', '.join(missing)}")
    try:
        dataset = make(load_episodes(request.episodes))
        paths = write_dataset(dataset, request.out_dir, request.name, roots=data_roots())
    except PathOutsideRootsError as exc:  # a link leaving the roots took out_dir's place
        raise DatasetError("out_dir", str(exc).removeprefix("out_dir: ")) from None
    except OSError as exc:
        raise DatasetError("out_dir", f"cannot write there: {exc}") from None
    except (ValueError, KeyError, TypeError) as exc:  # logs that are not episode records
        raise DatasetError("episodes", f"cannot build the {builder} dataset: {exc}") from None
    return {"data": paths["data"], "stats_file": paths["stats"], "stats": dataset.stats}


def _is_file(path: str) -> bool:
    """Path.is_file, with a name the OS refuses (too long) counted as missing, not raised."""
    try:
        return Path(path).is_file()
    except OSError:
        return False
