"""Shared fixtures: one build cache for the whole run (compiles are slow: ~25 s each on CPU),
GPU tests skipped without CUDA, and a recorded scripted search reused by several tests.

GPU markers (one scheme): `gpu` marks the default GPU set, which fits about 4 minutes on a
16-core H100 box once `python3 scripts/gpu-prebuild` has built its CUDA sources into the shared
build cache (KTREE_TEST_CACHE); `gpu_slow` marks what is slow by nature (the KernelBench-format
sweeps, whose builds take ~40 s each alone and ~95 s each side by side). A `gpu_slow` test is
never also marked `gpu`, so the two stages are
    python3 -m pytest -m gpu tests/test_gpu*.py        (default)
    python3 -m pytest -m gpu_slow tests/test_gpu*.py   (slow stage)
and both kinds are skipped where no CUDA GPU is visible."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords or "gpu_slow" in item.keywords:
            item.add_marker(skip)


def gpu_arch() -> str:
    """The arch the GPU tests (and scripts/gpu-prebuild, whose builds they load) build for:
    TORCH_CUDA_ARCH_LIST, else the first GPU's, else 9.0. It is part of each build's key."""
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if arch:
        return arch
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(0)
        return f"{major}.{minor}"
    return "9.0"


FIRST_SEEN_AFTER: dict[int, str] = {}  # pid of a process below the run -> the test after which it was seen


@pytest.fixture(autouse=True)
def _note_processes_left(request: pytest.FixtureRequest):
    """Which test left each process still running after it (reported at the end if it outlives
    the run; a module's Ray cluster, stopped at the module's end, is not)."""
    yield
    from engine.evaluate.sandbox import descendants

    for pid in descendants(os.getpid()):
        FIRST_SEEN_AFTER.setdefault(pid, request.node.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Nothing a test started outlives the run: a process left behind (a worker of an evaluator a
    failed test never closed, a daemon) would keep the run from ending. Named, then killed."""
    from engine.evaluate.sandbox import descendants, kill_tree

    left = descendants(os.getpid())
    if left:
        names = []
        for pid in left:
            try:
                name = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                name = "?"
            names.append(f"{pid} {name} (after {FIRST_SEEN_AFTER.get(pid, 'a session fixture')})")
        sys.stderr.write("\nprocesses left by the tests, killed:\n  " + "\n  ".join(names) + "\n")
        for pid in left:
            kill_tree(pid)


@pytest.fixture(scope="session", autouse=True)
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every evaluation in the run shares one build cache (KTREE_CACHE_DIR, inherited by
    subprocesses), so a source compiled once is a cache hit afterwards."""
    cache = Path(os.environ.get("KTREE_TEST_CACHE") or tmp_path_factory.mktemp("build-cache"))
    os.environ["KTREE_CACHE_DIR"] = str(cache)
    # The tests' device locks are their own: a ktree search on the same host does not hold them up.
    os.environ.setdefault("KTREE_RUNTIME_DIR", str(tmp_path_factory.mktemp("runtime")))
    return cache


def kernel_flags(flags: tuple[str, ...] | list[str]) -> list[str]:
    """The flags that judge the kernel: not a review mark, not a remark on the timing's quality
    (noisy, contended, reference-disturbed: what a busy test machine may give any verdict)."""
    from engine.evaluate.verdict import is_timing_flag

    return [f for f in flags if not f.startswith("review") and not is_timing_flag(f)]


def run_ktree(*args: str, env: dict[str, str] | None = None, timeout: float = 600,
              cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """ktree in a process group of its own: on a timeout the whole group is killed (workers and
    compilers included), so nothing it started outlives the test or holds the run's output open."""
    with subprocess.Popen(
        [sys.executable, "-m", "engine.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, **(env or {})}, cwd=cwd or REPO, start_new_session=True,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture(scope="session")
def recorded_search(tmp_path_factory: pytest.TempPathFactory, build_cache: Path) -> dict:
    """A real two-round scripted search on the cpu backend, recorded in a fresh DB. One parent
    kept per round (--top 1): the first round (3 ideas x 2 variants) already holds every outcome
    the library has (correct, incorrect, a compile error and its fix), and one second-round parent
    is all the tests reading it need, at about two thirds of the evaluations of the default --top 2."""
    db = tmp_path_factory.mktemp("recorded") / "k.db"
    proc = run_ktree("run", "softmax", "--provider", "scripted", "--backend", "cpu",
                     "--headless", "--json", "--rounds", "2", "--top", "1", "--db", str(db))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"db": db, "summary": json.loads(proc.stdout), "log": proc.stderr}


def query(db: Path, sql: str, *params: object) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql, params).fetchall()
