"""How a run shows its progress: a reporter per phase (`start`, `advance`, `finish`) that keeps
the counts for the REST API, and draws a rich bar on a terminal or prints a line now and then
in a log (`make_progress`); `StoppableProgress` also ends a phase when its run is cancelled."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class RunCancelled(Exception):
    """The run was cancelled while a phase was running."""


class ProgressReporter(Protocol):
    def start(self, phase: str, total: int, done: int = 0, unit: str = "episodes") -> None: ...
    def advance(self, n: int = 1) -> None: ...
    def finish(self) -> None: ...


@contextmanager
def tracked(
    progress: ProgressReporter, phase: str, total: int, done: int = 0, unit: str = "episodes"
) -> Iterator[None]:
    """A phase's progress bar from `start` to `finish`, also when the work inside fails."""
    progress.start(phase, total, done=done, unit=unit)
    try:
        yield
    finally:
        progress.finish()


class NullProgress:
    """Keeps the counts (for the REST API) and draws nothing."""

    def __init__(self) -> None:
        self.phase: str | None = None
        self.total = 0
        self.done = 0
        self.unit = "episodes"

    def start(self, phase: str, total: int, done: int = 0, unit: str = "episodes") -> None:
        self.phase, self.total, self.done, self.unit = phase, total, done, unit

    def advance(self, n: int = 1) -> None:
        self.done += n

    def finish(self) -> None:
        pass

    def snapshot(self) -> dict[str, Any]:
        return {"phase": self.phase, "done": self.done, "total": self.total, "unit": self.unit}


class StoppableProgress:
    """A phase's progress reporter that also ends the phase when its run is cancelled.

    Every training loop reports through `advance` (`on_progress=ctx.progress.advance`), so
    checking the cancel flag there, at most every `check_s` seconds (a store read), stops a
    long training at its next step rather than when the phase ends. Episode collection counts
    with `count`, which does not raise: the executor polls the flag itself and stops its
    workers cleanly. (In service mode a job handed to the learner reports its progress here
    through the learner client, which cancels the job there when this raises.)"""

    def __init__(
        self, inner: ProgressReporter, should_stop: Callable[[], bool], check_s: float = 1.0
    ) -> None:
        self.inner, self.should_stop, self.check_s = inner, should_stop, check_s
        self._checked = time.monotonic()

    def start(self, phase: str, total: int, done: int = 0, unit: str = "episodes") -> None:
        self.inner.start(phase, total, done=done, unit=unit)

    def advance(self, n: int = 1) -> None:
        self.inner.advance(n)
        now = time.monotonic()
        if now - self._checked >= self.check_s:
            self._checked = now
            if self.should_stop():
                raise RunCancelled("the run was cancelled during this phase")

    def count(self, n: int = 1) -> None:
        self.inner.advance(n)

    def finish(self) -> None:
        self.inner.finish()

    def __getattr__(self, name: str) -> Any:  # the inner reporter's counts (snapshot, done...)
        return getattr(self.inner, name)


class RichProgress(NullProgress):
    """A rich progress bar per phase, for a terminal (also keeps the counts)."""

    def __init__(self, console: Console) -> None:
        super().__init__()
        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._task: Any = None

    def start(self, phase: str, total: int, done: int = 0, unit: str = "episodes") -> None:
        super().start(phase, total, done, unit)
        self._bar.start()
        self._task = self._bar.add_task(f"{phase} {unit}", total=total, completed=done)

    def advance(self, n: int = 1) -> None:
        super().advance(n)
        self._bar.advance(self._task, n)

    def finish(self) -> None:
        self._bar.stop()


def clock_time(seconds: float) -> str:
    return str(timedelta(seconds=round(seconds)))


class LineProgress(NullProgress):
    """Progress for a log or a pipe: a line when a phase starts, at every tenth of it or after
    `every_s` seconds without one, and when it ends. (A rich bar there prints nothing until
    the phase ends; a tqdm bar prints one line per redraw.)"""

    def __init__(
        self,
        console: Console,
        every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.console, self.every_s, self.clock = console, every_s, clock
        self._started = self._printed_at = 0.0
        self._tenth = self._done_at_start = 0

    def _tenths(self) -> int:
        return 10 * self.done // self.total if self.total > 0 else 0

    def start(self, phase: str, total: int, done: int = 0, unit: str = "episodes") -> None:
        super().start(phase, total, done, unit)
        self._started = self.clock()
        self._tenth, self._done_at_start = self._tenths(), done  # a resumed phase starts at done
        self._print(self._started)

    def advance(self, n: int = 1) -> None:
        super().advance(n)
        now = self.clock()
        if self.done >= self.total:  # `finish` says it
            return
        if self._tenths() > self._tenth or now - self._printed_at >= self.every_s:
            self._tenth = self._tenths()
            self._print(now)

    def finish(self) -> None:
        elapsed = clock_time(self.clock() - self._started)
        self.console.print(f"{self.phase} {self.unit}: {self.done}/{self.total} in {elapsed}")

    def _print(self, now: float) -> None:
        self._printed_at = now
        line = f"{self.phase} {self.unit}: {self.done}/{self.total}"
        if self.total > 0:
            line += f" ({100 * self.done // self.total}%)"
        elapsed = now - self._started
        line += f", {clock_time(elapsed)} elapsed"
        played = self.done - self._done_at_start
        if played > 0 and self.done < self.total:
            left = elapsed / played * (self.total - self.done)
            line += f", about {clock_time(left)} left"
        self.console.print(line)


def make_progress(console: Console, enabled: bool = True) -> NullProgress:
    """A bar on a terminal, a line now and then elsewhere; nothing when not `enabled`."""
    if not enabled:
        return NullProgress()
    return RichProgress(console) if console.is_terminal else LineProgress(console)
