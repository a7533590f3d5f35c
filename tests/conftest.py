"""Shared fixtures: one build cache for the whole run (compiles are slow: ~25 s each on CPU),
GPU tests skipped without CUDA, and a recorded scripted search reused by several tests."""

from __future__ import annotations

import json
import os
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
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every evaluation in the run shares one build cache (KTREE_CACHE_DIR, inherited by
    subprocesses), so a source compiled once is a cache hit afterwards."""
    cache = Path(os.environ.get("KTREE_TEST_CACHE") or tmp_path_factory.mktemp("build-cache"))
    os.environ["KTREE_CACHE_DIR"] = str(cache)
    # The tests' device locks are their own: a ktree search on the same host does not hold them up.
    os.environ.setdefault("KTREE_RUNTIME_DIR", str(tmp_path_factory.mktemp("runtime")))
    return cache


def run_ktree(*args: str, env: dict[str, str] | None = None, timeout: float = 600,
              cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True,
        timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd or REPO,
    )


@pytest.fixture(scope="session")
def recorded_search(tmp_path_factory: pytest.TempPathFactory, build_cache: Path) -> dict:
    """A real two-round scripted search on the cpu backend, recorded in a fresh DB."""
    db = tmp_path_factory.mktemp("recorded") / "k.db"
    proc = run_ktree("run", "softmax", "--provider", "scripted", "--backend", "cpu",
                     "--headless", "--json", "--rounds", "2", "--db", str(db))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"db": db, "summary": json.loads(proc.stdout), "log": proc.stderr}


def query(db: Path, sql: str, *params: object) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql, params).fetchall()
