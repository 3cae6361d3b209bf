"""Where the CLI prints: rich as usual on a terminal, whole lines in a log or a pipe.

rich fits what it prints to the console's width, and a console that is not a terminal is 80
columns wide: there a table is squeezed until every cell is cut to "Col…". `output_console`
gives such a console room for any table, so tables print whole. Progress there is a line now
and then (`llmrl.recipes.progress.LineProgress`), and `quiet_library_progress_bars` turns
off Hugging Face's tqdm bars, which redraw with a carriage return: one line per redraw in a log.
"""

from __future__ import annotations

import os
import sys
from typing import IO

from rich.console import Console

# Wider than any table; rich pads a table to its own width, never to the console's.
UNBOUNDED_WIDTH = 100_000


def output_console(
    stderr: bool = False, file: IO[str] | None = None, terminal: bool | None = None
) -> Console:
    """A rich console for stdout (or stderr, or `file`) that never squeezes tables off a tty;
    `terminal=False` treats a terminal as a log (lines, no live bars)."""
    console = Console(stderr=stderr, file=file, force_terminal=terminal)
    if not console.is_terminal:
        console.width = UNBOUNDED_WIDTH
    return console


def quiet_library_progress_bars() -> None:
    """Turn off Hugging Face's progress bars (model loading) when stderr is not a terminal."""
    if sys.stderr.isatty():
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when transformers loads
    if "transformers" in sys.modules:  # already loaded: it has read the variable
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
