"""Shared fixtures: one build cache for the whole run, shared by its xdist workers (compiles are
slow: ~25 s each on CPU), GPU tests skipped without CUDA, and a recorded scripted search reused by
several tests.

GPU markers (one scheme): `gpu` marks the default GPU set, which fits about 4 minutes on a
16-core H100 box once `python3 scripts/gpu-prebuild` has built its CUDA sources into the shared
build cache (KTREE_TEST_CACHE); `gpu_slow` marks what is slow by nature (the KernelBench-format
sweeps, whose builds take ~40 s each alone and ~95 s each side by side). A `gpu_slow` test is
never also marked `gpu`, so the two stages are
    python3 -m pytest -o addopts= -m gpu tests/*/test_*_gpu.py        (default)
    python3 -m pytest -o addopts= -m gpu_slow tests/*/test_*_gpu.py   (slow stage)
and both kinds are skipped where no CUDA GPU is visible. `-o addopts=` drops pyproject.toml's
defaults (the quick tier's selection): a GPU script runs every test of the files it names.

Two tiers. `pytest` alone runs the quick tier (pyproject.toml's addopts: `-m "not slow" -n 2 --dist
loadfile`, two workers taking whole files), a contributor's loop; a test marked `slow` needs builds
of its own that no quick test shares, or a long run. The full command (README, .ci/run: `-m "(slow
or not slow) and not alone" -n 2`) runs both tiers in two xdist workers that take whole files, the
longest first (SLOW_FIRST), sharing one build cache and recording; then the tests marked `alone` (a
verdict or a limit that needs the host to itself) in one process (`-n 0`).
Each summary gives each tier's time."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.commands._output import quiet_triton_teardown

REPO = Path(__file__).resolve().parents[1]
quiet_triton_teardown()  # no report of Triton's after pytest's own (commands._output)


# The files that take the longest on a 2-core machine, longest first (measured: a serial run of both
# tiers, 46 min, 2026-11-28), after test_dataset.py, the first to ask for the recorded search (its
# recording starts at once, and is done by the time the other files that read it start). Under
# pytest-xdist (`-n 2 --dist loadfile --no-loadscope-reorder`) workers take whole files in this
# order, so no long file is left to start alone at the end of the run; in one process the quick tier
# runs first, each tier in this order. An unlisted file runs after these, in the order collected
# (folder by folder). A file is named here by its name alone: no two files of tests/ share one.
SLOW_FIRST = ("test_dataset.py", "test_evaluate.py", "test_realworld.py", "test_sandbox.py", "test_triton.py",
              "test_ray_executor.py", "test_steering.py", "test_cli.py", "test_search_options.py",
              "test_bad_input.py", "test_devices.py", "test_timing_hacks.py", "test_scripted_cuda_emulated.py",
              "test_scripted_cpu_verdicts.py", "test_cli_messages.py", "test_worker.py", "test_resume.py",
              "test_llm_search.py", "test_verdict_rules.py", "test_suite.py", "test_eval_limit.py",
              "test_gpu_check_plan.py", "test_problem_meta.py", "test_navigation.py", "test_build_levers.py",
              "test_profile.py")


def tier(item: pytest.Item | pytest.TestReport) -> str:
    return "slow" if "slow" in item.keywords else "quick"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    if config.getoption("numprocesses", None):  # workers take whole files: the longest first
        items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file keeps its order
    else:  # one process: the quick tier first
        items.sort(key=lambda item: (tier(item) == "slow", rank.get(item.path.name, len(rank))))
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords or "gpu_slow" in item.keywords:
            item.add_marker(skip)


TIER_TIMES: dict[str, dict[str, float]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each tier's tests, the sum of their times, and its span on the wall clock (under xdist, in the
    controller: the workers' reports come to it)."""
    t = TIER_TIMES.setdefault(tier(report), {"tests": 0, "seconds": 0.0, "start": report.start, "stop": 0.0})
    t["seconds"] += report.duration
    t["start"], t["stop"] = min(t["start"], report.start), max(t["stop"], report.stop)
    if report.when == "call" or (report.when == "setup" and not report.passed):
        t["tests"] += 1


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not TIER_TIMES or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    terminalreporter.section("tiers")
    for name in ("quick", "slow"):
        if name in TIER_TIMES:
            t = TIER_TIMES[name]
            wall = t["stop"] - t["start"]
            terminalreporter.write_line(
                f"{name} tier: {t['tests']:.0f} tests, {wall // 60:.0f}:{wall % 60:04.1f} on the wall clock"
                f" (first start to last end), {t['seconds']:.1f} s of test time")


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
    from engine.evaluate.host.sandbox import descendants

    for pid in descendants(os.getpid()):
        FIRST_SEEN_AFTER.setdefault(pid, request.node.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Nothing a test started outlives the run: a process left behind (a worker of an evaluator a
    failed test never closed, a daemon) would keep the run from ending. Named, then killed, by
    the process that ran the tests (each xdist worker; not the controller, whose children are the
    workers)."""
    from engine.evaluate.host.sandbox import descendants, kill_tree

    if session.config.getoption("numprocesses", None) and not os.environ.get("PYTEST_XDIST_WORKER"):
        return
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


def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's temp root, shared by its xdist workers (each worker's basetemp is a `popen-gwN`
    folder below it); without xdist, the basetemp itself."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def run_lock(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[None]:
    """One holder at a time among the run's workers: what the first builds, the others find."""
    with open(run_dir(tmp_path_factory) / f"{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session", autouse=True)
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every evaluation in the run shares one build cache (KTREE_CACHE_DIR, inherited by
    subprocesses), so a source compiled once is a cache hit afterwards, in every xdist worker
    (concurrent builds of one source wait on its build dir's lock: child_common.build_dir_lock)."""
    cache = Path(os.environ.get("KTREE_TEST_CACHE") or run_dir(tmp_path_factory) / "build-cache")
    cache.mkdir(parents=True, exist_ok=True)
    os.environ["KTREE_CACHE_DIR"] = str(cache)
    # The tests' device locks are their own (one set per worker, as one host each): a ktree search
    # on the same host does not hold them up, nor does a test that hangs a kernel in another worker.
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
    is all the tests reading it need, at about two thirds of the evaluations of the default --top 2.
    Recorded once per run (the first xdist worker to ask records it; the others wait for it) and
    copied whole into each worker's own DB, which its tests may open as they like."""
    shared = run_dir(tmp_path_factory) / "recorded"
    with run_lock(tmp_path_factory, "recorded"):
        if not shared.is_dir():
            made = Path(tempfile.mkdtemp(dir=shared.parent, prefix="recording-"))
            try:
                proc = run_ktree("run", "softmax", "--provider", "scripted", "--backend", "cpu", "--headless",
                                 "--json", "--rounds", "2", "--top", "1", "--db", str(made / "k.db"),
                                 timeout=800)
                recorded = {"summary": json.loads(proc.stdout) if proc.returncode == 0 else None,
                            "log": proc.stderr, "error": "" if proc.returncode == 0 else proc.stderr[-3000:]}
            except subprocess.TimeoutExpired as e:
                recorded = {"summary": None, "log": "", "error": f"the recording took over {e.timeout} s"}
            (made / "run.json").write_text(json.dumps(recorded))
            made.rename(shared)  # whole or not at all: a worker that waited finds one DB, one session
    recorded = json.loads((shared / "run.json").read_text())
    error = recorded.pop("error")
    assert not error, error  # a failed recording fails every worker's tests alike, as in one process
    db = tmp_path_factory.mktemp("recorded") / "k.db"
    with sqlite3.connect(shared / "k.db") as src, sqlite3.connect(db) as dst:
        src.backup(dst)
    return {"db": db, **recorded}


def query(db: Path, sql: str, *params: object) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql, params).fetchall()
