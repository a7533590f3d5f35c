"""The compile pool's probe for builds made outside the module's import: a solution may call
`load_inline` / `load` in `__init__`, in a helper, or in `forward` (most of CUDA-L1's published
solutions do). The compile child imports the module (building what the import builds), then, where
the source makes such a call inside a function, probes it: `ModelNew(*get_init_inputs())` and a
call on the problem's inputs, all on the meta device (no memory, no GPU: the pool hides them), in
a forked process. Each call the wrapped loaders (engine.evaluate.harness.fastbuild: `_placed`) had not
seen builds into the source's build dir and then stops the probe's call (`ProbeBuilt`), so no
kernel runs on meta tensors; the probe starts again until a round builds nothing new. The
evaluation (which sees the build dirs read-only) then imports what was built here; what the probe
could not reach (a forward that wants a CUDA tensor first, say) is built in the evaluation's own
scratch dir, before the timed window.

Whatever the candidate's code does besides building (fails without a GPU, crashes on a meta
tensor, hangs) ends the probe and is none of the verdict's business: only a build that fails with
the compiler's diagnostic is (`compile_error`). The probe is killed when it has been idle (not
building) for IDLE_S.

Runs in the compile child; torch and the standard library only.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import select
import signal
import sys
import time
from typing import Any

from engine.evaluate.jobs import EvalJob

IDLE_S = 20.0  # the probe outside a build this long: stopped (its builds so far are kept)
ROUNDS = 8  # at most this many calls built per probe
_LOADERS = {"load_inline", "load"}


def builds_in_functions(source: str) -> bool:
    """Whether the source calls torch's load_inline or load (cpp_extension's: by name, through an
    alias, or as `cpp_extension.load`) inside a function or method body: a build the module's
    import may not reach."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    names, modules = {"load_inline"}, {"cpp_extension"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("cpp_extension"):
            names.update(a.asname or a.name for a in node.names if a.name in _LOADERS)
        elif isinstance(node, ast.ImportFrom) and node.module == "torch.utils":
            modules.update(a.asname or a.name for a in node.names if a.name == "cpp_extension")
        elif isinstance(node, ast.Import):
            modules.update(a.asname for a in node.names if a.asname and a.name.endswith("cpp_extension"))

    def loader(func: ast.expr) -> bool:
        if isinstance(func, ast.Name):
            return func.id in names
        if isinstance(func, ast.Attribute):
            if func.attr == "load_inline":
                return True
            owner = func.value
            return func.attr == "load" and (owner.attr if isinstance(owner, ast.Attribute)
                                            else getattr(owner, "id", "")) in modules
        return False

    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            if any(isinstance(inner, ast.Call) and loader(inner.func) for inner in ast.walk(node)):
                return True
    return False


def probe(job: EvalJob, module: Any) -> dict[str, Any]:
    """Probe the solution's ModelNew in a forked process; {"built": [module names], "error": the
    first failed build's output, or None, "stopped": why the probe ended}."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the probe
        os.close(read_fd)
        code = 0
        try:
            _run(job, module, write_fd)
        except BaseException:  # noqa: BLE001  (whatever it is, the parent reads what was said)
            code = 1
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    os.close(write_fd)
    report: dict[str, Any] = {"built": [], "error": None, "stopped": "ended"}
    building, last, buffer = False, time.monotonic(), b""
    try:
        while True:
            wait = 1.0 if building else max(0.0, IDLE_S - (time.monotonic() - last))
            ready, _, _ = select.select([read_fd], [], [], wait)
            if not ready:
                if not building and time.monotonic() - last >= IDLE_S:
                    report["stopped"] = f"idle over {IDLE_S:g} s"
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                    break
                continue
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                message = json.loads(line)
                last = time.monotonic()
                building = message.get("event") == "build"
                if "built" in message:
                    report["built"].append(message["built"])
                if "error" in message:
                    report["error"] = message["error"]
                if "stopped" in message:
                    report["stopped"] = message["stopped"]
    finally:
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and report["stopped"] == "ended":
        report["stopped"] = f"the probe died (signal {os.WTERMSIG(status)})"
    return report


def _run(job: EvalJob, module: Any, fd: int) -> None:
    """In the forked probe: construct and call ModelNew on the meta device, round after round,
    each stopped by the first new build; say what happened on `fd`, one JSON line per message."""
    import torch

    from engine.evaluate.harness import fastbuild
    from engine.evaluate.loading import load_module_from_path

    def say(**message: Any) -> None:
        os.write(fd, (json.dumps(message) + "\n").encode())

    fastbuild.PROBE.update(on=True, done=set(), notify=lambda event: say(event=event))
    problem = load_module_from_path(job.problem_path, job.sizes)
    stopped = "no new build"
    for _ in range(ROUNDS):
        try:
            with torch.device("meta"), _cuda_on_meta(), torch.no_grad():
                torch.manual_seed(job.seed)
                new = module.ModelNew(*problem.get_init_inputs())
                new(*problem.get_inputs())
        except fastbuild.ProbeBuilt as built:
            say(built=str(built))
            continue
        except Exception as exc:
            if fastbuild.is_build_error(exc) and fastbuild.has_diagnostic(exc):
                from engine.evaluate.languages.common import format_exc

                say(error=fastbuild.with_first_error(exc, format_exc(exc)))
                return
            stopped = f"{type(exc).__name__}: {str(exc)[:200]}"
        break
    say(stopped=stopped)


def _cuda_on_meta() -> Any:
    """A torch function mode for the probe (a forked process, thrown away after): what the
    candidate puts on the GPU (`.cuda()`, `.to("cuda")`, `device="cuda"`) stays on the meta
    device, so a build that comes after such a line in __init__ is still reached."""
    import torch
    from torch.overrides import TorchFunctionMode

    def on_gpu(device: Any) -> bool:
        return isinstance(device, str | torch.device) and str(device).startswith("cuda")

    class CudaOnMeta(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            if func is torch.Tensor.cuda:
                return args[0]
            if on_gpu(kwargs.get("device")):
                kwargs["device"] = "meta"
            if func is torch.Tensor.to:
                args = tuple("meta" if i and on_gpu(a) else a for i, a in enumerate(args))
            return func(*args, **kwargs)

    return CudaOnMeta()
