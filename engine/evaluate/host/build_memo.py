"""What the engine remembers of a successful build, so that a source built before is not sent to a
compile process again. torch + stdlib only.

A compile process costs its start-up (Python, torch, the sandbox: 2-3 s of CPU on a 2-core host)
even when every object is already in the build cache, and a search sends the same source many times
(a resumed session, a repeated scripted answer, `ktree eval` of a file judged before). After a build
that ended `compiled`, the engine writes a memo under the cache's `compiled/` folder, which no
candidate can write (a compile process may write its own build dir and the shared precompiled
header only, an evaluation nothing): the compile result, a fingerprint of what the build depends
on (the backend, the build environment, the levers) and each built library's size and mtime. The
next evaluation of the same source reuses the result when the fingerprint is the same and every
library is still there, unchanged; anything else (a cleared or rebuilt dir, another compiler or
arch list) is a miss, and the compile process runs as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from engine import settings

MEMO_DIR = "compiled"
# Differ between processes without changing what is built: the temp dirs, the cores the builds were
# given, the ledger of GPU memory, a test's crash point.
_VOLATILE = frozenset({"TMPDIR", "HOME", "KTREE_CPU_CORES", "KTREE_LEDGER_DIR", "KTREE_CRASH_AT"})


def fingerprint(backend: str, env: dict[str, str]) -> str:
    """What a build depends on besides its source (which its build dir's key holds)."""
    kept = {k: v for k, v in env.items() if k not in _VOLATILE}
    kept["KTREE_BUILD_LEVERS"] = settings.get("KTREE_BUILD_LEVERS", kept.get("KTREE_BUILD_LEVERS", ""))
    return hashlib.sha256(json.dumps([backend, sorted(kept.items())]).encode()).hexdigest()[:24]


def _libraries(build_dir: Path) -> dict[str, list[int]]:
    """Every shared library under the build dir: relative path -> [size, mtime in ns]."""
    found: dict[str, list[int]] = {}
    with contextlib.suppress(OSError):
        for path in build_dir.rglob("*.so"):
            st = path.stat()
            found[str(path.relative_to(build_dir))] = [st.st_size, st.st_mtime_ns]
    return found


def _path(cache_dir: str, key: str) -> Path:
    return Path(cache_dir) / MEMO_DIR / f"{key}.json"


def lookup(cache_dir: str, key: str, fp: str) -> dict[str, Any] | None:
    """The remembered compile result for this build dir and fingerprint; None on any miss."""
    try:
        memo = json.loads(_path(cache_dir, key).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(memo, dict) or memo.get("fingerprint") != fp or not isinstance(memo.get("result"), dict):
        return None
    if _libraries(Path(cache_dir) / key) != memo.get("libraries"):
        return None
    return dict(memo["result"])


def record(cache_dir: str, key: str, fp: str, result: dict[str, Any]) -> None:
    """Remember a build that ended `compiled` (nothing else is remembered here)."""
    if result.get("status") != "compiled":
        return
    path = _path(cache_dir, key)
    memo = {"fingerprint": fp, "result": result, "libraries": _libraries(Path(cache_dir) / key)}
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(memo))
        os.replace(tmp, path)


async def compile_job(job: Any, timeout_s: float, env: dict[str, str],
                      sandbox: Any) -> tuple[str, dict | None, str]:
    """`runner.run_child` for a compile job, answered from the memo where the same build ended
    `compiled` before (its result, with `cached` set and the look-up's own seconds)."""
    import time

    from engine.evaluate.child.load import build_key
    from engine.evaluate.host.runner import run_child
    from engine.evaluate.host.sandbox import scrubbed_env

    t0 = time.monotonic()
    build_env = scrubbed_env(env)
    key, fp = build_key(job, build_env), fingerprint(job.backend, build_env)
    found = lookup(job.cache_dir, key, fp)
    if found is not None:
        return "ok", {**found, "cached": True, "compile_s": max(time.monotonic() - t0, 1e-6)}, ""
    outcome, result, log = await run_child(job, timeout_s, env, sandbox)
    if outcome == "ok" and result is not None:
        record(job.cache_dir, key, fp, result)
    return outcome, result, log
