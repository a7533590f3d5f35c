"""The host-wide device lock (engine.evaluate.host.hostlock): two processes using one device key
serialize, a waiter names the holder, a SIGKILLed holder frees it; the evaluator holds it around
its device use and shows the wait in device_states(). CPU only (a fake GPU key), no compile.
Also: max_rel_err reflects the worst elementwise relative error."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from engine.evaluate.child.evaluation import compare
from engine.evaluate.host.evaluator import LocalEvaluator
from engine.evaluate.host.hostlock import DeviceLock, describe_holder, gpu_key, runtime_dir

REPO = Path(__file__).resolve().parents[2]

# A process that takes the lock of `key` through a cpu LocalEvaluator's device (the evaluator's
# own path), or through DeviceLock directly, records its critical section's start and end, and
# holds it for HOLD seconds.
HOLDER = textwrap.dedent("""
    import asyncio, json, os, sys, time
    from engine.evaluate.host.evaluator import LocalEvaluator
    from engine.evaluate.host.hostlock import DeviceLock

    key, out, hold, via = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]

    async def main():
        if via == "evaluator":
            ev = LocalEvaluator("cpu", worker=False)
            ev.session = 7
            ev.devices[0].lock_key = key
            async with ev._device():
                start = time.time()
                print("held", flush=True)
                await asyncio.sleep(hold)
                end = time.time()
        else:
            lock = DeviceLock(key)
            await lock.acquire(session=7)
            start = time.time()
            print("held", flush=True)
            await asyncio.sleep(hold)
            end = time.time()
            lock.release()
        with open(out, "w") as fh:
            json.dump({"start": start, "end": end, "pid": os.getpid()}, fh)

    asyncio.run(main())
""")


def _spawn(tmp_path: Path, key: str, name: str, hold: float, via: str = "lock") -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "KTREE_RUNTIME_DIR": str(tmp_path / "run")}
    return subprocess.Popen([sys.executable, "-c", HOLDER, key, str(tmp_path / name), str(hold), via],
                            env=env, cwd=REPO, stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize("via", ["lock", "evaluator"])
def test_two_processes_serialize_on_one_device_key(tmp_path: Path, via: str):
    procs = [_spawn(tmp_path, "GPU-fake-0000", f"p{i}.json", 0.8, via) for i in range(2)]
    for p in procs:
        assert p.wait(timeout=120) == 0
    a, b = sorted((json.loads((tmp_path / f"p{i}.json").read_text()) for i in range(2)),
                  key=lambda r: r["start"])
    assert a["end"] <= b["start"], f"critical sections overlap: {a} {b}"


def test_distinct_keys_do_not_serialize(tmp_path: Path):
    procs = [_spawn(tmp_path, f"GPU-fake-{i}", f"p{i}.json", 1.5) for i in range(2)]
    for p in procs:
        assert p.wait(timeout=120) == 0
    a, b = (json.loads((tmp_path / f"p{i}.json").read_text()) for i in range(2))
    assert a["start"] < b["end"] and b["start"] < a["end"]


def _wait_held(proc: subprocess.Popen) -> None:
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"


def test_waiter_reports_the_holder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("KTREE_RUNTIME_DIR", str(tmp_path / "run"))
    holder = _spawn(tmp_path, "cpu", "h.json", 3.0, via="evaluator")
    try:
        _wait_held(holder)
        ev = LocalEvaluator("cpu", worker=False)
        seen: list[str | None] = []

        async def go() -> None:
            async def watch() -> None:
                while True:
                    seen.append(ev.device_states()[0]["waiting_for"])
                    await asyncio.sleep(0.05)

            watcher = asyncio.create_task(watch())
            async with ev._device():
                assert ev.device_states()[0]["waiting_for"] is None
            watcher.cancel()

        asyncio.run(go())
        assert f"cpu0 (held by pid {holder.pid}, session 7)" in seen
        assert holder.wait(timeout=60) == 0
    finally:
        holder.kill()


def test_lock_is_released_when_the_holder_is_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("KTREE_RUNTIME_DIR", str(tmp_path / "run"))
    holder = _spawn(tmp_path, "GPU-fake-kill", "k.json", 600.0)
    try:
        _wait_held(holder)
        lock = DeviceLock("GPU-fake-kill")
        assert not lock.try_acquire()
        assert lock.holder()["pid"] == holder.pid
        assert describe_holder(lock.holder()) == f"held by pid {holder.pid}, session 7"
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
        deadline = time.monotonic() + 10
        while not lock.try_acquire():
            assert time.monotonic() < deadline, "the lock outlived its SIGKILLed holder"
            time.sleep(0.05)
        assert lock.holder()["pid"] == os.getpid()
        lock.release()
    finally:
        holder.kill()


def test_runtime_dir_and_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("KTREE_RUNTIME_DIR", str(tmp_path / "a"))
    assert runtime_dir() == tmp_path / "a" and (tmp_path / "a").stat().st_mode & 0o777 == 0o700
    monkeypatch.delenv("KTREE_RUNTIME_DIR")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "x"))
    assert runtime_dir() == tmp_path / "x" / "ktree"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert runtime_dir() == Path(f"/tmp/ktree-{os.getuid()}")
    assert gpu_key(2, "GPU-abc") == "GPU-abc" and gpu_key(0, "MIG-x") == "MIG-x"
    assert gpu_key(3, "3").startswith(("GPU-", "gpu3"))  # NVML's UUID, else the physical index


def test_evaluator_lock_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("KTREE_RUNTIME_DIR", str(tmp_path))
    assert [d.lock_key for d in LocalEvaluator("cpu", worker=False).devices] == ["cpu"]
    # several cpu devices share the cores on purpose (tests of the dispatch): no host lock
    assert [d.lock_key for d in LocalEvaluator("cpu", worker=False, devices=2).devices] == [None, None]
    assert [d.lock_key for d in LocalEvaluator("cpu", worker=False, host_lock=False).devices] == [None]


def test_one_process_two_evaluators_serialize(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """flock is per open file: two evaluators of one process also queue for the device."""
    monkeypatch.setenv("KTREE_RUNTIME_DIR", str(tmp_path))
    spans: list[tuple[float, float]] = []

    async def use(ev: LocalEvaluator) -> None:
        async with ev._device():
            start = time.monotonic()
            await asyncio.sleep(0.3)
            spans.append((start, time.monotonic()))

    async def go() -> None:
        await asyncio.gather(use(LocalEvaluator("cpu", worker=False)), use(LocalEvaluator("cpu", worker=False)))

    asyncio.run(go())
    (a0, a1), (b0, b1) = sorted(spans)
    assert a1 <= b0


def test_max_rel_err_counts_small_references():
    """A reference small everywhere (|ref| < atol) used to give max_rel_err 0.0 for any output."""
    ref = torch.full((64,), 1e-6, dtype=torch.float32)
    out = ref + 4e-2
    ok, errs, _ = compare(out, ref, atol=1e-2, rtol=1e-2)
    assert not ok
    assert errs["rel_l2_err"] == pytest.approx(4e4, rel=1e-3)
    assert errs["max_rel_err"] == pytest.approx(4e4, rel=1e-3)
    # zeros in the reference: those elements count in max_abs_err only, the rest still relative
    ref = torch.tensor([0.0, 2.0, -4.0])
    out = torch.tensor([0.5, 3.0, -4.0])
    _, errs, _ = compare(out, ref, atol=1e-2, rtol=1e-2)
    assert errs["max_rel_err"] == pytest.approx(0.5) and errs["max_abs_err"] == pytest.approx(1.0)
    _, errs, _ = compare(torch.ones(4), torch.ones(4), atol=1e-2, rtol=1e-2)
    assert errs["max_rel_err"] == 0.0


def test_a_search_holding_the_lock_is_named_with_its_database():
    """A waiter in another database is told which one the holding session is in (issue 36)."""
    named = describe_holder({"pid": 5, "session": {"id": 3, "db": "/x/k.db"}})
    assert named == "held by pid 5, session 3 of /x/k.db"
    assert describe_holder({"pid": 5, "session": 7}) == "held by pid 5, session 7"
    assert describe_holder({"pid": 5, "session": {"id": 3, "db": None}}) == "held by pid 5, session 3"
