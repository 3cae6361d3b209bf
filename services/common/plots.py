"""matplotlib for files only: every plot llmrl draws is a PNG, written by services and runs that
have no display, so the backend is Agg, set once here rather than at every plot."""

from __future__ import annotations

from typing import Any


def pyplot() -> Any:
    """`matplotlib.pyplot` on the Agg backend (imported on first use: matplotlib is slow to
    import and most commands draw nothing)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
