"""Host-wide admission (engine.evaluate.host.admission, engine.evaluate.host.hostlock): a device's
lock is given in the order its waiters came, a dead waiter's ticket is passed over; the host's
build slots hold across evaluators; a cpu timing holds the cores against every ktree process's
heavy work (which waits for it, and says so) and no new heavy work jumps a waiting timer; and any
number of `ktree eval` processes at once give their verdicts alone (slow)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from engine.evaluate.host import admission, hostlock
from engine.evaluate.host.hostlock import DeviceLock


def test_a_device_lock_goes_to_its_waiters_in_the_order_they_came(tmp_path: Path, monkeypatch):
    """W1 waits from t=0, W2 from t=0.25; the holder lets go at t=1.1, just before W2's poll (1.25)
    and well before W1's (1.5): first come, first served all the same."""
    monkeypatch.setattr(hostlock, "POLL_S", 0.5)
    order: list[str] = []
    heard: list[dict] = []

    async def go() -> None:
        holder = DeviceLock("dev", tmp_path)
        assert holder.try_acquire()

        async def waiter(name: str, delay: float) -> None:
            await asyncio.sleep(delay)
            lock = DeviceLock("dev", tmp_path)
            await lock.acquire(name, on_wait=lambda h: heard.append(h or {}))
            order.append(name)
            await asyncio.sleep(0.05)
            lock.release()

        tasks = [asyncio.create_task(waiter("w1", 0.0)), asyncio.create_task(waiter("w2", 0.25))]
        await asyncio.sleep(1.1)
        holder.release()
        await asyncio.gather(*tasks)

    asyncio.run(go())
    assert order == ["w1", "w2"]
    assert any(h.get("ahead") == 1 for h in heard), heard  # W2 heard that W1 waits before it


def test_a_dead_waiter_s_ticket_is_passed_over(tmp_path: Path):
    lock = DeviceLock("dev", tmp_path)
    queue = lock.path.with_name(lock.path.name + ".queue")
    queue.mkdir()
    (queue / f"{0:020d}-1-dead").write_text("")  # nobody holds its flock: its waiter died

    async def go() -> None:
        await asyncio.wait_for(lock.acquire(), 2.0)

    asyncio.run(go())
    assert lock.held and not list(queue.iterdir())
    assert "2 waiting before this one" in hostlock.describe_holder({"pid": 5, "ahead": 2})


def test_the_host_s_build_slots_hold_across_evaluators(tmp_path: Path):
    said: list[str] = []
    running, most = [0], [0]

    async def build(slots: admission.BuildSlots) -> None:
        async with slots.slot("a build", said.append):
            running[0] += 1
            most[0] = max(most[0], running[0])
            await asyncio.sleep(0.3)
            running[0] -= 1

    async def go() -> None:  # (three "processes": each its own BuildSlots on the host's files)
        await asyncio.gather(*(build(admission.BuildSlots(2, tmp_path)) for _ in range(5)))

    asyncio.run(go())
    assert most[0] == 2
    assert any("waiting for a build slot (all 2 of the host's in use" in s for s in said), said


def test_a_cpu_timing_holds_the_cores_against_every_process_s_heavy_work(tmp_path: Path):
    """A build runs; a timer comes and waits for it; a worker's start that comes after the timer
    waits for the timing (it does not jump the timer); each says what it waits for."""
    events: list[str] = []
    said: dict[str, list[str]] = {"timer": [], "start": []}

    async def go() -> None:
        async def build() -> None:
            async with admission.CpuQuiet(tmp_path).busy("a build"):
                events.append("build+")
                await asyncio.sleep(0.6)
                events.append("build-")

        async def timer() -> None:
            await asyncio.sleep(0.1)
            async with admission.CpuQuiet(tmp_path).quiet("cpu timing", said["timer"].append):
                events.append("time+")
                await asyncio.sleep(0.4)
                events.append("time-")

        async def start() -> None:
            await asyncio.sleep(0.3)
            async with admission.CpuQuiet(tmp_path).busy("a worker's start", said["start"].append):
                events.append("start+")

        await asyncio.gather(build(), timer(), start())

    asyncio.run(go())
    assert events == ["build+", "build-", "time+", "time-", "start+"], events
    assert any("builds or worker starts" in s for s in said["timer"]), said
    assert any(s.startswith("waiting for the cores: a cpu timing of pid") for s in said["start"]), said


def test_heavy_work_waits_for_memory_and_says_so(monkeypatch):
    free = iter([2**28, 2**28, 2**31])
    monkeypatch.setattr(admission, "memory_available_bytes", lambda: next(free))
    monkeypatch.setattr(admission, "POLL_S", 0.01)
    said: list[str] = []
    asyncio.run(admission.wait_for_memory(said.append))
    assert said == ["waiting for memory: 0.2 GiB available on the host, 1.0 GiB wanted"], said


CANDIDATE = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        e = torch.exp(x - x.max(dim=1, keepdim=True).values)
        return e / e.sum(dim=1, keepdim=True)
'''
PROCESSES = 5  # beyond this host's cores (2 on the project's cpu machine)


@pytest.mark.slow
def test_evaluations_beyond_the_host_s_cores_give_their_verdicts_alone(tmp_path: Path):
    """PROCESSES `ktree eval` processes at once, each its own database, one host: every verdict is
    the one alone (no `crashed`, no timeout), each queued for the cpu in turn and saying so."""
    from tests.conftest import run_ktree

    solution = tmp_path / "softmax_new.py"
    solution.write_text(CANDIDATE)
    env = {"KTREE_RUNTIME_DIR": str(tmp_path / "run")}

    def one(i: int) -> tuple[dict, str]:
        out = run_ktree("eval", "softmax", str(solution), "--backend", "cpu", "--json", "--db",
                        str(tmp_path / f"k{i}.db"), env=env, timeout=900)
        verdicts = json.loads(out.stdout)
        return (verdicts[0] if isinstance(verdicts, list) else verdicts), out.stderr

    alone, _ = one(0)
    t0 = time.monotonic()
    with ThreadPoolExecutor(PROCESSES) as pool:
        together = list(pool.map(one, range(1, PROCESSES + 1)))
    wall = time.monotonic() - t0
    assert (os.cpu_count() or 1) < PROCESSES
    for verdict, _ in together:
        assert verdict["status"] == alone["status"], (verdict["status"], verdict["log"][-500:])
        assert [f.split(":")[0] for f in verdict["flags"] if f != "noisy"] == \
            [f.split(":")[0] for f in alone["flags"] if f != "noisy"]
    said = "\n".join(stderr for _, stderr in together)
    assert "waiting for cpu0" in said and "waiting before this one" in said, said
    print(f"{PROCESSES} at once: {wall:.0f} s")
