"""Whether a run fits in this machine's memory, decided at submission rather than by the kernel's
OOM killer an hour in.

Each setting has its own upper limit (`llmrl.common.bounds`), but a run's memory is a product
of several: GLAM's update keeps the activations of `microbatch_size` samples through every
trained layer, so `finetune=full` with a 64-sample minibatch asks for tens of GB although each
setting alone is ordinary. A recipe's config gives its estimate (`RecipeConfig.memory_estimate`:
the larger parts, in bytes, and the settings that drive them); `check_fits` refuses a run whose
estimate exceeds the memory this process may use, naming the settings to lower.

The memory is the machine's physical memory or the cgroup's limit (a container), whichever is
smaller; `LLMRL_LIMIT_MEMORY_GIB` sets it instead, for an orchestrator that submits runs to
bigger workers than itself, or to leave room for other jobs. Estimates are deliberately rough
(what a run allocates at its peak, within a factor of two): they catch the runs that cannot
fit, not the ones that barely do.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

MEMORY_VARIABLE = "LLMRL_LIMIT_MEMORY_GIB"
GIB = 1024**3
CGROUP_LIMIT = Path("/sys/fs/cgroup/memory.max")  # cgroup v2; "max" when unlimited


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """A run's estimated peak memory: its larger parts in bytes, and the settings (config field
    names) that drive them, the first the one most worth lowering."""

    parts: dict[str, int]
    settings: tuple[str, ...]

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def describe(self) -> str:
        return ", ".join(f"{name} {gib(size)}" for name, size in self.parts.items())


class OverMemoryError(ValueError):
    """A run that would not fit; `setting` is the config field most worth lowering."""

    def __init__(self, message: str, setting: str) -> None:
        super().__init__(message)
        self.setting = setting


def gib(size: float) -> str:
    return f"{size / GIB:.1f} GiB"


def _cgroup_limit() -> int | None:
    try:
        text = CGROUP_LIMIT.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def memory_limit() -> tuple[int, str]:
    """The bytes a run may use here and where that figure comes from (for the refusal)."""
    text = os.environ.get(MEMORY_VARIABLE, "").strip()
    if text:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{MEMORY_VARIABLE}: expected a positive number of GiB, got {text!r}")
        return int(value * GIB), MEMORY_VARIABLE
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    cgroup = _cgroup_limit()
    if cgroup is not None and cgroup < physical:
        return cgroup, "this container's memory limit"
    return physical, "this machine's memory"


def check_fits(estimate: MemoryEstimate | None) -> None:
    """Refuse (OverMemoryError) an estimate above the memory this process may use."""
    if estimate is None:
        return
    limit, source = memory_limit()
    if estimate.total <= limit:
        return
    settings = ", ".join(estimate.settings)
    raise OverMemoryError(
        f"the run would need about {gib(estimate.total)} ({estimate.describe()}), more than "
        f"{source} ({gib(limit)}); lower {settings}, or run it where {MEMORY_VARIABLE} (or the "
        "machine) allows more",
        estimate.settings[0],
    )
