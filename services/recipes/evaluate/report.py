"""The evaluate recipe's plot: each episode's return (coloured by success) and the lengths."""

from __future__ import annotations

from typing import Any

import numpy as np

from llmrl.common.episodes import EpisodeRecord
from llmrl.common.plots import pyplot


def plot_episodes(records: list[EpisodeRecord], path: Any, title: str) -> None:
    plt = pyplot()

    index = np.arange(len(records))
    returns = [r.episode_return for r in records]
    colors = ["tab:green" if r.success else "tab:red" for r in records]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.bar(index, returns, color=colors)
    left.set_xlabel("episode")
    left.set_ylabel("return")
    left.set_title("return per episode (green: success)")
    right.hist([r.length for r in records], bins=min(20, max(len(records), 1)), color="tab:blue")
    right.set_xlabel("episode length (steps)")
    right.set_ylabel("episodes")
    right.set_title("episode lengths")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
