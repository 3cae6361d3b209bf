"""Text observation spaces shared by the environments (gymnasium `Text` with a wide charset)."""

from __future__ import annotations

import string

from gymnasium import spaces

# Letters, digits, punctuation and newlines: what observations, missions and plans contain.
TEXT_CHARSET = frozenset(string.ascii_letters + string.digits + " .,;:!?'\"()-_/\n")


def text_space(max_length: int = 1024) -> spaces.Text:
    """A `Text` space that also admits the empty string (e.g. an empty plan)."""
    return spaces.Text(max_length=max_length, min_length=0, charset=TEXT_CHARSET)
