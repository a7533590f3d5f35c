"""Parent side of evaluation: start the child in its own process group, enforce the timeout,
turn whatever happened (result, crash, hang) into a result. Never raises for candidate faults.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from engine.evaluate.jobs import EvalJob
from engine.evaluate.verdict import Verdict, log_tail

PROJECT_ROOT = Path(__file__).resolve().parents[2]

# Environment variables a build or a run legitimately needs; everything else is dropped.
_ENV_ALLOW = re.compile(
    r"^(PATH|HOME|USER|LOGNAME|SHELL|LANG|LANGUAGE|TERM|TZ|TMPDIR|LC_[A-Z_]+|"
    r"CUDA_[A-Z_]*|NVIDIA_[A-Z_]*|LD_LIBRARY_PATH|LIBRARY_PATH|CPATH|C_INCLUDE_PATH|"
    r"CPLUS_INCLUDE_PATH|CC|CXX|CFLAGS|CXXFLAGS|LDFLAGS|NVCC_[A-Z_]*|TORCH_[A-Z_]*|"
    r"MAX_JOBS|OMP_NUM_THREADS|MKL_NUM_THREADS|CCACHE_[A-Z_]*|XDG_CACHE_HOME|"
    r"VIRTUAL_ENV|CONDA_PREFIX|PYTHONHOME)$"
)
_ENV_DENY = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|AUTH", re.IGNORECASE)


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for generated code: an allow-list, never a secret."""
    env = {k: v for k, v in os.environ.items() if _ENV_ALLOW.match(k) and not _ENV_DENY.search(k)}
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


def default_cache_dir() -> Path:
    """Build dirs live here, keyed by source hash: `KTREE_CACHE_DIR` or the XDG cache dir."""
    if os.environ.get("KTREE_CACHE_DIR"):
        return Path(os.environ["KTREE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ktree" / "build"


async def run_child(
    job: EvalJob, timeout_s: float, extra_env: dict[str, str] | None = None
) -> tuple[str, dict[str, Any] | None, str]:
    """Run one child. Returns (outcome, result, log tail).

    outcome: "ok" (result holds the child's JSON), "timeout", or "crashed".
    """
    workdir = Path(tempfile.mkdtemp(prefix=f"ktree-{job.mode}-"))
    job_path, result_path, log_path = workdir / "job.json", workdir / "result.json", workdir / "log.txt"
    job_path.write_text(json.dumps(job.to_dict()))
    try:
        with open(log_path, "wb") as log:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "engine.evaluate.child", str(job_path), str(result_path),
                cwd=workdir, env=scrubbed_env(extra_env), stdin=asyncio.subprocess.DEVNULL,
                stdout=log, stderr=log, start_new_session=True,
            )
            try:
                await asyncio.wait_for(proc.wait(), timeout_s)
            except (TimeoutError, asyncio.CancelledError) as exc:
                _kill_group(proc.pid)
                await proc.wait()
                if isinstance(exc, asyncio.CancelledError):
                    raise
                text = _read_tail(log_path)
                return "timeout", None, f"killed after {timeout_s:g} s\n{text}"
        _kill_group(proc.pid)  # anything the candidate left behind
        text = _read_tail(log_path)
        if result_path.exists():
            return "ok", json.loads(result_path.read_text()), text
        code = proc.returncode
        why = f"killed by signal {signal.Signals(-code).name}" if code and code < 0 else f"exit code {code}"
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
