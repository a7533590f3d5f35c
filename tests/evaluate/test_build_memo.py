"""A source built before is not sent to a compile process again (engine.evaluate.host.build_memo):
the memo is kept where no candidate writes, and any change to what the build depends on, or to
the built libraries, is a miss."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from engine.evaluate.host import build_memo, runner
from engine.evaluate.host.evaluator import LocalEvaluator
from engine.evaluate.host.sandbox import WRITABLE_IN_CACHE
from engine.problems import load_problem

SOFTMAX = load_problem("softmax")
WORK = {"flops": SOFTMAX.cost("cpu").flops, "bytes": SOFTMAX.cost("cpu").bytes}
SCRIPTED = Path(__file__).resolve().parents[2] / "engine" / "scripted_library"
# built by other tests too (the quick tier's ctypes verdicts): the ctypes structure, no torch header
HONEST = (SCRIPTED / "softmax" / "cpu" / "rowblock_3.py").read_text()


def built(tmp_path: Path, key: str = "k1") -> Path:
    lib = tmp_path / key / "ext" / "ext.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF library")
    return lib


def test_a_remembered_build_is_reused_until_anything_it_depends_on_changes(tmp_path: Path):
    lib = built(tmp_path)
    result = {"status": "compiled", "log": "", "compile_s": 12.5}
    build_memo.record(str(tmp_path), "k1", "fp", result)
    assert build_memo.lookup(str(tmp_path), "k1", "fp") == result
    assert build_memo.lookup(str(tmp_path), "k1", "other") is None  # another compiler, arch list, levers
    assert build_memo.lookup(str(tmp_path), "k2", "fp") is None  # another source
    os.utime(lib, ns=(1, 1))  # the library rebuilt (or replaced) since
    assert build_memo.lookup(str(tmp_path), "k1", "fp") is None
    lib.unlink()  # the build dir cleared
    assert build_memo.lookup(str(tmp_path), "k1", "fp") is None
    # Only a build that ended compiled is remembered; a broken memo is a miss, not an error.
    build_memo.record(str(tmp_path), "k3", "fp", {"status": "compile_error", "log": "error: x"})
    assert build_memo.lookup(str(tmp_path), "k3", "fp") is None
    (tmp_path / build_memo.MEMO_DIR / "k4.json").write_text("{not json")
    assert build_memo.lookup(str(tmp_path), "k4", "fp") is None


def test_the_fingerprint_keeps_what_a_build_depends_on_and_not_a_processs_temp_dirs(
        monkeypatch: pytest.MonkeyPatch):
    env = {"PATH": "/usr/bin", "CXX": "g++", "TORCH_CUDA_ARCH_LIST": "9.0", "TMPDIR": "/tmp/a", "HOME": "/h"}
    fp = build_memo.fingerprint("cuda", env)
    assert build_memo.fingerprint("cuda", {**env, "TMPDIR": "/tmp/b", "KTREE_CPU_CORES": "1"}) == fp
    assert build_memo.fingerprint("cuda", {**env, "CXX": "clang++"}) != fp
    assert build_memo.fingerprint("cuda", {**env, "TORCH_CUDA_ARCH_LIST": "8.0"}) != fp
    assert build_memo.fingerprint("cpu", env) != fp
    monkeypatch.setenv("KTREE_BUILD_LEVERS", "none")
    assert build_memo.fingerprint("cuda", env) != fp


def test_no_candidate_can_write_the_memo():
    assert build_memo.MEMO_DIR not in WRITABLE_IN_CACHE  # an evaluation's writable cache dirs


def test_a_source_evaluated_again_starts_no_compile_process(monkeypatch: pytest.MonkeyPatch):
    started: list[str] = []
    real = runner.run_child

    async def counted(job, *args, **kwargs):  # type: ignore[no-untyped-def]
        started.append(job.mode)
        return await real(job, *args, **kwargs)

    monkeypatch.setattr(runner, "run_child", counted)

    async def go() -> list:
        evaluator = LocalEvaluator("cpu", eval_timeout=120)
        try:
            job = evaluator.job(SOFTMAX.path, HONEST, SOFTMAX.sizes_for("cpu"), **WORK)
            verdicts = [await evaluator.evaluate(job) for _ in range(2)]
            kept = (Path(evaluator.cache_dir) / build_memo.MEMO_DIR).glob("*.json")
            memos = [json.loads(p.read_text()) for p in kept]
            return verdicts, memos
        finally:
            await evaluator.close()

    (first, second), memos = asyncio.run(go())
    assert first.status == second.status == "correct", (first.log, second.log)
    assert started.count("compile") <= 1  # once at most (none where an earlier test built it)
    assert second.compile_s is not None and second.compile_s < 0.5
    assert any(m["result"]["status"] == "compiled" and m["libraries"] for m in memos)
