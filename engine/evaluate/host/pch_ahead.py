"""The precompiled torch headers the compile pool's builds went without, made beside them.

On a cold build cache the first build used to make the header first (about a minute on a 2-core
box) and only then compile, so the first verdict waited for both. Where builds need not wait for a
timer (a GPU, or the cpu backend's pinned timer), a build that finds no header for its flags now
goes on without one and says so in its result (`pch_wanted`: engine.evaluate.harness.fastbuild's
PCH_AHEAD); this makes each wanted header once, in a process of its own in the sandbox (writing
only the cache's `pch/` dir), holding a compile slot like any build. The builds that come after it
use it; the one that went without keeps its flags (its levers' record says so), wherever it loads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.evaluate.host.sandbox import Sandbox, kill_tree, make_workdir

PCH_TIMEOUT_S = 600.0


class PchAhead:
    def __init__(self, cache_dir: str, sandbox: Sandbox, env: dict[str, str],
                 slot: Callable[[], contextlib.AbstractAsyncContextManager[Any]]):
        self.cache_dir, self.sandbox, self.env, self.slot = cache_dir, sandbox, env, slot
        self._started: set[str] = set()
        self.tasks: set[asyncio.Task[int | None]] = set()

    def after_build(self, result: dict[str, Any] | None) -> None:
        """Start making each header a build went without (once per set of flags; not for a build
        remembered from before, whose header was asked for when it was made)."""
        if not result or result.get("cached"):
            return
        for wanted in result.get("pch_wanted") or []:
            key = json.dumps(wanted, sort_keys=True)
            if key in self._started:
                continue
            self._started.add(key)
            task = asyncio.get_running_loop().create_task(self._make(wanted))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _make(self, wanted: dict[str, Any]) -> int | None:
        """The header for one set of flags: its process's exit code (None: cut at PCH_TIMEOUT_S)."""
        workdir = make_workdir("pch")
        argv = self.sandbox.command(
            [sys.executable, "-m", "engine.evaluate.harness.fastbuild", "pch", self.cache_dir,
             json.dumps(list(wanted.get("extra_cflags") or [])),
             json.dumps(list(wanted.get("extra_include_paths") or []))],
            workdir=workdir, read_only=[self.cache_dir], writable=[str(Path(self.cache_dir) / "pch")],
            timeout_s=PCH_TIMEOUT_S)
        try:
            async with self.slot():
                proc = await asyncio.create_subprocess_exec(
                    *argv, cwd=workdir, env=self.sandbox.env(self.env, workdir=workdir),
                    stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
                try:
                    return await asyncio.wait_for(proc.wait(), PCH_TIMEOUT_S)
                except (TimeoutError, asyncio.CancelledError):
                    kill_tree(proc.pid)
                    await proc.wait()
                    raise
        except TimeoutError:
            return None
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    async def wait(self) -> None:
        """Until every header started here is made (or failed)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)

    async def close(self) -> None:
        """The headers still being made are finished first (once per cache: later runs use them);
        a cancelled close stops them."""
        await self.wait()
