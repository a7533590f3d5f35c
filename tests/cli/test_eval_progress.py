"""`ktree eval` says what it is doing: one stderr line per phase change per file (building, built,
waiting for a device's holder, checking, timing, done), none with --quiet, stdout left to the
verdict. CPU backend; the solutions are torch ops, so nothing is compiled."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.commands._eval_progress import EvalProgress, labels
from engine.evaluate.host.evaluator import LocalEvaluator
from tests.conftest import REPO, run_ktree

SOLUTION = ("import torch\nclass ModelNew(torch.nn.Module):\n"
            "    def forward(self, x): return torch.softmax(x, dim=1)\n")

# Holds the cpu device's host lock (as session 7) until its stdin closes.
HOLDER = textwrap.dedent("""
    import sys
    from engine.evaluate.host.hostlock import DeviceLock

    lock = DeviceLock("cpu")
    assert lock.try_acquire(session=7)
    print("held", flush=True)
    sys.stdin.read()
    lock.release()
""")


def _lines(stderr: str, name: str) -> list[str]:
    return [line.removeprefix(f"{name}: ") for line in stderr.splitlines() if line.startswith(f"{name}: ")]


def _assert_phases(lines: list[str], status: str) -> None:
    assert lines[0] == "building", lines
    assert re.fullmatch(r"built in \d+\.\d s", lines[1]), lines
    assert lines[-3:-1] == ["checking", "timing"], lines
    assert re.fullmatch(rf"done in \d+\.\d s: {status}", lines[-1]), lines


@pytest.mark.slow
def test_eval_prints_its_phases_on_stderr_and_none_with_quiet(tmp_path: Path):
    sol = tmp_path / "softmax_sol.py"
    sol.write_text(SOLUTION)
    proc = run_ktree("eval", "softmax", str(sol), "--backend", "cpu", "--json")
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["status"] == "flagged"  # stdout: the verdict alone
    lines = _lines(proc.stderr, "softmax_sol.py")
    _assert_phases(lines, "flagged")
    assert len(lines) == 5, lines  # no one else holds the cores: no waiting line

    proc = run_ktree("eval", "softmax", str(sol), "--backend", "cpu", "--json", "--quiet")
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["status"] == "flagged"
    assert "softmax_sol.py" not in proc.stderr


@pytest.mark.slow
def test_eval_waiting_for_the_device_names_its_holder(tmp_path: Path):
    """Another process holds the device's host lock: the file says who, once, then goes on when
    the lock is let go."""
    sol = tmp_path / "sol.py"
    sol.write_text(SOLUTION)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], env=env, cwd=REPO, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    ktree = None
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        ktree = subprocess.Popen([sys.executable, "-m", "engine.cli", "eval", "softmax", str(sol),
                                  "--backend", "cpu"], env=env, cwd=REPO, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        assert ktree.stderr is not None
        seen = []
        for line in ktree.stderr:  # until it waits (a timeout below kills it if it never does)
            seen.append(line.rstrip("\n"))
            if line.startswith("sol.py: waiting"):
                break
        assert seen[-1] == f"sol.py: waiting for cpu0 (held by pid {holder.pid}, session 7)", seen
        holder.stdin.close()  # let go of the lock
        assert holder.wait(timeout=30) == 0
        out, err = ktree.communicate(timeout=300)
        assert ktree.returncode == 1, err
        lines = _lines("\n".join(seen) + "\n" + err, "sol.py")
        _assert_phases(lines, "flagged")
        assert sum(line.startswith("waiting") for line in lines) == 1, lines
        assert "flagged" in out
    finally:
        holder.kill()
        if ktree is not None and ktree.poll() is None:
            os.killpg(ktree.pid, signal.SIGKILL)
            ktree.communicate()


def test_a_holder_is_said_once_and_again_when_it_changes(tmp_path: Path):
    """The lock is polled every 0.1 s; only a change of holder makes a new line (a holder that
    cannot be read for a moment, between two, makes none). A build that made the precompiled
    header says so."""
    evaluator = LocalEvaluator("cpu", worker=False, cache_dir=tmp_path)
    out = io.StringIO()
    progress = EvalProgress(evaluator, 1, out=out)
    device = evaluator.devices[0]

    async def evaluate(on_phase):
        await on_phase("compiling")
        gch = tmp_path / "pch" / "k" / "torch" / "extension.h.gch"  # this build made the header
        gch.parent.mkdir(parents=True, exist_ok=True)
        gch.write_bytes(b"")
        await on_phase("waiting")
        for holder in [{"pid": 1, "session": 2}] * 3 + [None, {"pid": 3}, {"pid": 3}]:
            evaluator._lock_wait(device, holder)
        device.waiting_for = None
        await on_phase("checking")
        return type("V", (), {"status": "correct"})()

    asyncio.run(progress.run("a.py", evaluate))
    lines = _lines(out.getvalue(), "a.py")
    assert re.fullmatch(r"built in \d+\.\d s \(with the precompiled torch header, once per build cache\)",
                        lines[1]), lines
    assert lines[2:4] == ["waiting for cpu0 (held by pid 1, session 2)", "waiting for cpu0 (held by pid 3)"]
    assert lines[4] == "checking" and lines[5].endswith(": correct")

    evaluator.on_note = None  # (the first printer's)
    quiet = io.StringIO()
    asyncio.run(EvalProgress(evaluator, 1, quiet=True, out=quiet).run("a.py", evaluate))
    assert quiet.getvalue() == ""


def test_labels_are_names_unless_two_share_one():
    assert labels([Path("a/x.py"), Path("b/y.py")]) == ["x.py", "y.py"]
    assert labels([Path("a/x.py"), Path("b/x.py"), Path("c.py")]) == ["a/x.py", "b/x.py", "c.py"]
