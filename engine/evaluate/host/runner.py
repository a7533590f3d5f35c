"""Parent side of evaluation: start the child in its own process group, enforce the timeout,
turn whatever happened (result, crash, hang) into a result. Never raises for candidate faults.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from engine import settings
from engine.evaluate.host.eval_limit import EvalLimit
from engine.evaluate.host.sandbox import Sandbox, evaluation_binds, kill_tree, make_workdir, scrubbed_env, watch
from engine.evaluate.jobs import EvalJob
from engine.evaluate.verdict import Verdict, log_tail

__all__ = ["default_cache_dir", "failed_verdict", "run_child", "scrubbed_env"]  # scrubbed_env: moved


def default_cache_dir() -> Path:
    """Build dirs live here, keyed by source hash: `KTREE_CACHE_DIR` or the XDG cache dir."""
    if settings.get("KTREE_CACHE_DIR"):
        return Path(settings.get("KTREE_CACHE_DIR"))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ktree" / "build"


async def run_child(
    job: EvalJob, timeout: float | EvalLimit, extra_env: dict[str, str] | None = None,
    sandbox: Sandbox | None = None,
) -> tuple[str, dict[str, Any] | None, str]:
    """Run one child in the sandbox (default: the best isolation available, default limits), for
    at most `timeout`: seconds (a build, a reference), or an evaluation's time limit (its seconds,
    and its words on a timed-out log). Returns (outcome, result, log tail).

    outcome: "ok" (result holds the child's JSON), "timeout", or "crashed" (died, or killed by the
    watchdog for breaking a memory or process limit).
    """
    limit = timeout if isinstance(timeout, EvalLimit) else None
    timeout_s = limit.seconds if limit is not None else timeout
    sandbox = sandbox or Sandbox(backend=job.backend)
    if job.mode in ("reference", "warm"):
        # The user's own problem file, not generated code; torch.compile's on-disk caches must
        # outlive one process (warm-up, then timing), which a private /tmp would not allow.
        sandbox = sandbox.replace(isolation="basic")
    workdir = make_workdir(job.mode)
    job_path, result_path, log_path = workdir / "job.json", workdir / "result.json", workdir / "log.txt"
    job_path.write_text(json.dumps(job.to_dict()))
    read_only, writable = [job.problem_path] if job.problem_path else [], [job.cache_dir]
    if job.mode == "evaluate":  # runs the candidate: no build dir writable (sandbox.evaluation_binds)
        cache_ro, writable = evaluation_binds(job.cache_dir)
        read_only += cache_ro
    elif job.mode == "compile":  # runs the candidate's module code too: its own build dir only
        from engine.evaluate.child.evaluation import build_key

        env = sandbox.env(extra_env, workdir=workdir)
        own = os.path.join(job.cache_dir, build_key(job, env))
        read_only, writable = [*read_only, job.cache_dir], [own, os.path.join(job.cache_dir, "pch")]
    argv = sandbox.command(
        [sys.executable, "-m", "engine.evaluate.child.evaluation", str(job_path), str(result_path)],
        workdir=workdir, read_only=read_only, writable=writable, timeout_s=timeout_s,
    )
    try:
        with open(log_path, "wb") as log:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=workdir, env=sandbox.env(extra_env, workdir=workdir),
                stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            )
            watcher = asyncio.ensure_future(watch(proc.pid, sandbox.limits))
            waiter = asyncio.ensure_future(proc.wait())
            try:
                done, _ = await asyncio.wait({waiter, watcher}, timeout=timeout_s,
                                             return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                kill_tree(proc.pid)
                await proc.wait()
                raise
            finally:
                watcher.cancel()
            if waiter not in done:
                kill_tree(proc.pid)
                await proc.wait()
                text = _read_tail(log_path)
                if watcher in done:
                    return "crashed", None, f"killed: {watcher.result()}\n{text}"
                killed = limit.killed() if limit is not None else f"killed after {timeout_s:g} s"
                return "timeout", None, f"{killed}\n{text}"
        _kill_group(proc.pid)  # anything the candidate left behind
        text = _read_tail(log_path)
        if result_path.exists():
            return "ok", json.loads(result_path.read_text()), text
        why = sandbox.exit_reason(proc.returncode)
        return "crashed", None, f"evaluation process died ({why}) before reporting\n{text}"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_tail(path: Path) -> str:
    try:
        return log_tail(path.read_bytes().decode("utf-8", errors="replace"))
    except OSError:
        return ""


def failed_verdict(outcome: str, log: str, job: EvalJob) -> Verdict:
    return Verdict(status=outcome, backend=job.backend, sizes=dict(job.sizes), log=log)


async def run_tool(argv_prefix: list[str], job: EvalJob, action: str, env: dict[str, str],
                   timeout_s: float, sandbox: Any) -> tuple[dict[str, Any] | None, str, str]:
    """Start `[prefix...] python -m engine.evaluate.profile.profiler JOB OUT ACTION` in the sandbox and wait
    (killed at `timeout_s`). `{log}` in the prefix is the tool's log file. (result or None, the
    process's output tail, the tool's log)."""

    workdir = make_workdir(f"profile-{action}")
    job_path, result_path = workdir / "job.json", workdir / "result.json"
    out_path, log_path = workdir / "out.txt", workdir / "tool.log"
    job_path.write_text(json.dumps(job.to_dict()))
    prefix = [a.replace("{log}", str(log_path)) for a in argv_prefix]
    cache_ro, cache_rw = evaluation_binds(job.cache_dir)  # runs the candidate: no build dir writable
    argv = sandbox.command(
        [*prefix, sys.executable, "-m", "engine.evaluate.profile.profiler", str(job_path), str(result_path),
         action],
        workdir=workdir, read_only=([job.problem_path] if job.problem_path else []) + cache_ro,
        writable=cache_rw, timeout_s=timeout_s)
    try:
        with open(out_path, "wb") as out:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=workdir, env=sandbox.env(env, workdir=workdir), stdin=asyncio.subprocess.DEVNULL,
                stdout=out, stderr=out, start_new_session=True)
            try:
                await asyncio.wait_for(proc.wait(), timeout_s)
            except TimeoutError:
                kill_tree(proc.pid)
                await proc.wait()
                return {"error": f"over its time budget of {timeout_s:g} s"}, _read_tail(out_path), ""
            except asyncio.CancelledError:
                kill_tree(proc.pid)
                await proc.wait()
                raise
        kill_tree(proc.pid)
        result = json.loads(result_path.read_text()) if result_path.exists() else None
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        keep = settings.get("KTREE_PROFILE_LOGS")  # a dir: keep each tool's log (debugging)
        if keep and (log or out_path.exists()):
            os.makedirs(keep, exist_ok=True)
            stem = os.path.join(keep, f"{action}-{time.time():.3f}")
            with open(f"{stem}.log", "w") as fh:
                fh.write(log + "\n--- output ---\n" + _read_tail(out_path))
        return result, _read_tail(out_path), log
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
