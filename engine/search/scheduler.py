"""The pipeline's plumbing: every unit of search work (a node's ideas call, a variant's
generate -> compile -> check -> time) is its own asyncio task, so a variant goes to the compile
pool as soon as its reply arrives and the device takes compiled variants as they come. The
evaluator limits compile workers and holds one timing per GPU; this module adds the rest:

- a limit of concurrent LLM calls per provider,
- the pause gate (no new LLM call or evaluation starts while paused; in-flight ones finish),
- the tasks in flight, keyed by the node they work on, so a prune or a stop can cancel them,
- `drain()`: wait until no work is left (work may add work: a fix, a human's expand).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any


class Scheduler:
    def __init__(self, llm_per_provider: int = 8, llm_limits: dict[str, asyncio.Semaphore] | None = None):
        """`llm_limits`: the per-provider limits to use, shared with other schedulers (a suite's
        problems share one LLM concurrency limit); by default this scheduler's own."""
        self.llm_per_provider = llm_per_provider
        self._llm: dict[str, asyncio.Semaphore] = {} if llm_limits is None else llm_limits
        self._open = asyncio.Event()
        self._open.set()
        self.tasks: dict[asyncio.Task[None], int] = {}  # task -> node it works on
        self.cancelled: dict[int, str] = {}  # node -> why its work was cancelled
        self.errors: list[BaseException] = []
        self.llm_running = 0
        self._changed = asyncio.Event()

    # -- pause -------------------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    def pause(self) -> None:
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    async def gate(self) -> None:
        """Return when not paused."""
        await self._open.wait()

    # The evaluator's Gate (engine.evaluate.base): a built variant takes a device only while
    # the search is not paused.
    def is_open(self) -> bool:
        return not self.paused

    async def wait(self) -> None:
        await self.gate()

    @contextlib.asynccontextmanager
    async def llm_slot(self, provider: str) -> AsyncIterator[None]:
        """One of the provider's concurrent calls; waits for the gate first."""
        sem = self._llm.setdefault(provider, asyncio.Semaphore(self.llm_per_provider))
        await self.gate()
        async with sem:
            self.llm_running += 1
            try:
                yield
            finally:
                self.llm_running -= 1

    # -- tasks -------------------------------------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, None], node_id: int) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks[task] = node_id
        task.add_done_callback(self._done)
        self._changed.set()
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            self.errors.append(task.exception())  # type: ignore[arg-type]
        self._changed.set()

    def fail(self, error: BaseException) -> None:
        """An error from outside the tasks (the command poller): `drain` raises it."""
        self.errors.append(error)
        self._changed.set()

    def cancel(self, node_ids: set[int], reason: str) -> list[int]:
        """Cancel the work of these nodes; the nodes whose work was cancelled."""
        hit = []
        for task, node_id in list(self.tasks.items()):
            if node_id in node_ids and not task.done():
                self.cancelled[node_id] = reason
                task.cancel()
                hit.append(node_id)
        return hit

    def busy_nodes(self) -> set[int]:
        return set(self.tasks.values())

    async def drain(self) -> None:
        """Wait until no task is left (tasks may spawn tasks). A task that failed with an
        unexpected error cancels the rest, and the error is raised here."""
        while True:
            self._raise_errors()
            if not self.tasks:
                return
            self._changed.clear()
            await self._changed.wait()

    def _raise_errors(self) -> None:
        if self.errors:
            error = self.errors.pop(0)
            for task in list(self.tasks):
                task.cancel()
            raise error

    async def cancel_all(self) -> None:
        """Cancel every task and wait for them to end (their subprocesses are killed)."""
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
