"""Bounded values for a Prometheus label whose values come from requests.

Every distinct label value is a series the registry keeps for the process's life, so a label
fed from input (a field name a caller made up) must not take unboundedly many values: the
first `limit` distinct values are kept, any later new one is counted under `other`.
"""

from __future__ import annotations

import threading


class BoundedLabelValues:
    def __init__(self, limit: int = 32, other: str = "other") -> None:
        if limit < 1:
            raise ValueError(f"limit: expected an integer >= 1, got {limit!r}")
        self.limit = limit
        self.other = other
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        with self._lock:
            if value in self._seen:
                return value
            if len(self._seen) < self.limit:
                self._seen.add(value)
                return value
        return self.other
