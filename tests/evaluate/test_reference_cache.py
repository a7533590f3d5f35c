"""The reference's timings once per host (engine.evaluate.host.reference_times: reference_start/finish,
engine.evaluate.child.reference, engine.evaluate.gate): keyed by the problem's source, sizes,
precision, GPU model (not its CUDA_VISIBLE_DEVICES index) and torch version; shared by evaluator
instances and processes through the cache dir, timed by one of them; the timing process set up
before the device's lock and let time only once it is held."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine.evaluate import gate
from engine.evaluate.host import reference_times
from engine.evaluate.host.evaluator import Device, LocalEvaluator

REPO = Path(__file__).resolve().parents[2]
SOFTMAX = REPO / "problems" / "level1" / "softmax.py"
SIZES = {"batch_size": 128, "dim": 4096}


def fake_child(calls: list, seen: dict | None = None):
    """A reference timing child: says ready at its gate, waits for go, reports."""

    async def run_child(job, timeout_s, env, sandbox):
        calls.append(job.mode)
        where = Path(env["KTREE_GATE"])
        (where / "ready").write_text("x")
        t0 = time.monotonic()
        while not (where / "go").exists():
            await asyncio.sleep(0.01)
        if seen is not None:
            seen["waited"] = time.monotonic() - t0
        return "ok", {"eager_ms": 2.0, "eager_p10_ms": 1.9, "eager_p90_ms": 2.2, "eager_lo_ms": 1.95,
                      "eager_hi_ms": 2.05, "compile_ms": 1.0, "compile_p10_ms": 0.9, "compile_p90_ms": 1.1,
                      "compile_lo_ms": 0.95, "compile_hi_ms": 1.05}, ""

    return run_child


def test_the_key_is_the_problem_source_sizes_precision_gpu_model_and_torch(tmp_path, monkeypatch):
    a, b = LocalEvaluator("cpu", cache_dir=tmp_path), LocalEvaluator("cpu", cache_dir=tmp_path / "other")
    d = a.devices[0]
    key = a.reference_key(str(SOFTMAX), SIZES, d)
    assert key == b.reference_key(str(SOFTMAX), SIZES, b.devices[0])  # another instance, the same key
    copy = tmp_path / "elsewhere.py"
    copy.write_text(SOFTMAX.read_text())
    assert a.reference_key(str(copy), SIZES, d) == key  # by source, not by path
    copy.write_text(SOFTMAX.read_text() + "\n# changed\n")
    assert a.reference_key(str(copy), SIZES, d) != key
    assert a.reference_key(str(SOFTMAX), {**SIZES, "dim": 2048}, d) != key
    assert a.reference_key(str(SOFTMAX), SIZES, d, "bf16") != key
    import torch

    monkeypatch.setattr(torch, "__version__", "0.0-other")
    assert a.reference_key(str(SOFTMAX), SIZES, d) != key


def test_on_cuda_the_gpu_model_keys_it_not_the_visible_index(monkeypatch):
    monkeypatch.setattr(reference_times, "gpu_name", lambda index, entry="": "NVIDIA H100 80GB HBM3")
    fake = type("E", (), {"backend": "cuda"})()
    g0 = Device("gpu0", 0, {"CUDA_VISIBLE_DEVICES": "0"}, None)
    g3 = Device("gpu3", 3, {"CUDA_VISIBLE_DEVICES": "3"}, None)
    assert (LocalEvaluator.device_model(fake, g0) == LocalEvaluator.device_model(fake, g3)
            == "cuda:NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(reference_times, "gpu_name", lambda index, entry="": "NVIDIA A100-SXM4-80GB")
    assert LocalEvaluator.device_model(fake, g0) == "cuda:NVIDIA A100-SXM4-80GB"


def test_timed_once_then_shared_by_instances_and_processes(tmp_path, monkeypatch):
    calls: list = []
    seen: dict = {}
    monkeypatch.setattr(reference_times, "run_child", fake_child(calls, seen))

    async def first() -> tuple[dict, dict]:
        a = LocalEvaluator("cpu", cache_dir=tmp_path)
        pending = await a.reference_start(str(SOFTMAX), SIZES, a.devices[0])
        # Set up and waiting at its gate: nothing timed until the device is held.
        assert pending["gate"].is_ready and not pending["task"].done()
        await asyncio.sleep(0.1)
        result = await a.reference_finish(pending)
        b = LocalEvaluator("cpu", cache_dir=tmp_path)  # another instance: reads the file
        return result, await b.reference(str(SOFTMAX), SIZES, b.devices[0])

    result, again = asyncio.run(first())
    assert calls == ["reference"] and seen["waited"] >= 0.1
    assert again == result and result["eager_p10_ms"] == 1.9 and result["compile_hi_ms"] == 1.05
    [file] = (tmp_path / "reference").glob("*.json")
    assert json.loads(file.read_text()) == result
    assert not list((tmp_path / "peaks" / "gates").iterdir())  # the gate dir is cleaned up

    # Another process with the same cache dir: the file, no timing child.
    code = (
        "import asyncio, sys\n"
        "from engine.evaluate.host import evaluator as m\n"
        "async def boom(*a, **k): raise SystemExit('timed again')\n"
        "m.run_child = boom\n"
        f"e = m.LocalEvaluator('cpu', cache_dir={str(tmp_path)!r})\n"
        f"r = asyncio.run(e.reference({str(SOFTMAX)!r}, {SIZES!r}, e.devices[0]))\n"
        "print(r['eager_ms'])\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "2.0", proc.stderr[-2000:]


def test_two_evaluators_at_once_time_it_once(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(reference_times, "run_child", fake_child(calls))

    async def both() -> list[dict]:
        a, b = LocalEvaluator("cpu", cache_dir=tmp_path), LocalEvaluator("cpu", cache_dir=tmp_path)
        return await asyncio.gather(a.reference(str(SOFTMAX), SIZES, a.devices[0]),
                                    b.reference(str(SOFTMAX), SIZES, b.devices[0]))

    one, two = asyncio.run(both())
    assert calls == ["reference"] and one == two


def test_a_reference_that_failed_is_not_written_down(tmp_path, monkeypatch):
    async def dies(job, timeout_s, env, sandbox):
        return "crashed", None, "boom"

    monkeypatch.setattr(reference_times, "run_child", dies)
    e = LocalEvaluator("cpu", cache_dir=tmp_path)
    result = asyncio.run(e.reference(str(SOFTMAX), SIZES, e.devices[0]))
    assert "error" in result and not list((tmp_path / "reference").glob("*.json"))


def test_the_gate_waits_for_go_and_gives_up_instead_of_hanging(tmp_path, monkeypatch):
    monkeypatch.delenv("KTREE_GATE", raising=False)
    assert gate.wait_for_go() == 0.0  # no gate: no wait
    g = gate.Gate(tmp_path)
    monkeypatch.setenv("KTREE_GATE", str(g.dir))
    threading.Timer(0.1, g.open).start()
    assert gate.wait_for_go("test") >= 0.05 and g.is_ready
    g2 = gate.Gate(tmp_path)
    monkeypatch.setenv("KTREE_GATE", str(g2.dir))
    monkeypatch.setenv("KTREE_GATE_WAIT_S", "0.05")
    with pytest.raises(gate.GateTimeout):
        gate.wait_for_go("test")
    g.close()
    g2.close()
    assert not os.listdir(tmp_path)


def test_the_timing_child_sets_up_before_its_gate_and_reports_the_noise(tmp_path, monkeypatch):
    import torch

    from engine.evaluate.child import reference as child_reference
    from engine.evaluate.host.make_job import make_job

    monkeypatch.setattr(torch, "compile", lambda model: model)  # (no compiler wanted here)
    g = gate.Gate(tmp_path)
    monkeypatch.setenv("KTREE_GATE", str(g.dir))
    threading.Timer(0.3, g.open).start()
    job = make_job(SOFTMAX, "", {"batch_size": 16, "dim": 64}, backend="cpu", cache_dir=str(tmp_path),
                   flops=None, bytes=None, mode="reference", time_budget_s=0.05, max_reps=10)
    result = child_reference.run(job)
    assert g.is_ready and result["held_s"] > 0
    assert result["setup_s"] + result["gate_wait_s"] >= 0.25  # it waited for the gate to open
    for side in ("eager", "compile"):
        p10, med, p90 = result[f"{side}_p10_ms"], result[f"{side}_ms"], result[f"{side}_p90_ms"]
        assert p10 <= med <= p90 and result[f"{side}_lo_ms"] <= result[f"{side}_hi_ms"]
    g.close()
