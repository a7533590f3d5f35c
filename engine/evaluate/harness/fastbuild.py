"""Compile levers for `load_inline` builds. torch + stdlib only.

`install()` replaces `torch.utils.cpp_extension.load_inline` in an evaluation process (before the
candidate's source runs) with a wrapper that keeps every KernelBench-format solution valid and
builds it faster where it can:

- ``pch``: a precompiled `torch/extension.h`, built once per (torch, compiler, flags) under the
  build cache with torch's own PCH command line and found by GCC through an include directory
  placed first on the search path (with a forwarding torch/extension.h beside it, so a build
  whose flags the .gch does not fit still finds the real header). Never written into torch's
  install (which may be read-only).
  Measured on the H100 box: main.cpp 19 s -> 9 s.
- ``slim``: in `cuda_sources`, `#include <torch/extension.h>` becomes `<torch/types.h>` (what
  load_inline itself includes for CUDA sources); when that build fails, the original is built
  and the choice is remembered beside the build. cuda.cu 62 s -> 33 s on the H100 box.
- ``mini``: tried before ``slim``: the CUDA sources get ktree's own header
  (`include/ktree_torch_min.h`: the Tensor class and its methods, the usual factories, the
  dispatch macros, the torch:: dtype names) instead of <torch/types.h>, which brings every ATen
  operator through nvcc's front ends (cudafe++, cicc) and the host compiler. Half the
  preprocessed text (6.7 MB against 12.7 MB with torch 2.13); a KernelBench softmax's cuda.cu
  34-36 s -> 16-24 s on a loaded 2-core box (nvcc 13, not yet measured on the H100 box). A
  source that needs more fails to build and falls through to ``slim``, then to the source as
  written (only where the lighter header may be the cause), and the choice is remembered.

The fastest path is a solution shaped the way ktree's prompts ask: CUDA sources with CUDA headers
only and launchers taking raw pointers; host wrappers in `cpp_sources` behind the precompiled
header (cuda.cu 1.2 s, main.cpp 9 s on the H100 box).

The compile child and the GPU worker install the same levers, so a module built by one is up to
date for the other and only loads there.

`load` is wrapped too, and both decide where a build goes (`_placed`), wherever the candidate calls
them (at import, in `__init__`, in a helper, in `forward`: engine.evaluate.languages.build_probe makes the
compile pool reach the calls outside the import) and whatever `build_directory` it names: the
source's build dir in the cache; in an evaluation, which may not write the cache, the module built
there, or where there is none, a scratch dir of that evaluation's own (`scratch_dir`).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine import settings
from engine.evaluate.build_errors import (  # noqa: F401  (used here and through this module)
    _GCC_ERROR,
    _NVCC_ERROR,
    _UNDEFINED,
    _chain_text,
    first_error,
    has_diagnostic,
    is_build_error,
    log_text,
    with_first_error,
)

ALL_LEVERS = ("pch", "slim", "mini")
# The arch rewrites done by load_inline in this process since the last clear (the build of one
# solution): {"original": [...], "flags": [...], "why": ...}; the verdict's log and record say so.
RETARGETED: list[dict[str, Any]] = []
# In an evaluation ("on"), load_inline imports the module the compile pool built for this
# source and these flags (torch's own load would take a lock file and run ninja in the build
# dir, which the evaluation sees read-only); "seen": name -> the call hashes so far, numbered
# as torch's versioner numbers them (name, name_v1, ...).
PREBUILT: dict[str, Any] = {"on": False, "seen": {}}
# The lowest real arch each nvcc major version still builds, where `nvcc --list-gpu-arch` can't say.
NVCC_MIN_ARCH = {10: 30, 11: 35, 12: 50, 13: 75}
_ARCH = re.compile(r"\b(sm|compute|lto)_(\d+)([af]?)\b")
_EXTENSION_INCLUDE = re.compile(r"^\s*#\s*include\s*[<\"]torch/extension\.h[>\"]", re.M)
_TORCH_INCLUDE = re.compile(r"^\s*#\s*include\s*[<\"]torch/(?:extension|types)\.h[>\"]", re.M)
MINI_HEADER = "ktree_torch_min.h"
MINI_INCLUDE_DIR = str(Path(__file__).resolve().parent / "include")  # where MINI_HEADER ships


def levers_from_env() -> tuple[str, ...]:
    """KTREE_BUILD_LEVERS: comma-separated subset of ALL_LEVERS, or "none"; default all."""
    raw = settings.get("KTREE_BUILD_LEVERS")
    if raw is None:
        return ALL_LEVERS
    return tuple(x for x in (p.strip() for p in raw.split(",")) if x in ALL_LEVERS)


class _Captured(Exception):
    pass


def torch_pch_command(extra_cflags: list[str], extra_include_paths: list[str]) -> list[str] | None:
    """The command torch itself would run to precompile torch/extension.h with these flags,
    captured (not run), or None where torch has no PCH support (not Linux, not GCC)."""
    import torch.utils.cpp_extension as ce

    build = getattr(ce, "_check_and_build_extension_h_precompiler_headers", None)
    if build is None or not sys.platform.startswith("linux"):
        return None
    real_root = ce._TORCH_PATH
    captured: list[list[str]] = []
    original = subprocess.check_output

    def capture(cmd: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(cmd, list) and "c++-header" in cmd:
            captured.append([str(c) for c in cmd])
            raise _Captured
        return original(cmd, *args, **kwargs)

    with tempfile.TemporaryDirectory() as fake_root:
        os.makedirs(os.path.join(fake_root, "include", "torch"))
        subprocess.check_output = capture  # type: ignore[assignment]
        ce._TORCH_PATH = fake_root
        try:
            build(list(extra_cflags), list(extra_include_paths))
        except _Captured:
            pass
        finally:
            subprocess.check_output = original  # type: ignore[assignment]
            ce._TORCH_PATH = real_root
    if not captured:
        return None
    return [arg.replace(fake_root, real_root) for arg in captured[0]]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# In the compile pool's process (child.evaluation.run_compile) `on`: a build that finds no precompiled
# header for its flags goes on without it and names the flags in `wanted`; the engine makes the
# header beside the builds (engine.evaluate.host.pch_ahead), and the builds after it use it. (Made
# first, it held the first build a minute on a cold cache.)
PCH_AHEAD: dict[str, Any] = {"on": False, "wanted": []}


def _pch_place(cache_dir: str, extra_cflags: list[str],
               extra_include_paths: list[str]) -> tuple[list[str], Path, str] | None:
    """(torch's PCH command line for these flags, the include dir it goes to, its key); None where
    torch has none."""
    cmd = torch_pch_command(extra_cflags, extra_include_paths)
    if cmd is None or "-o" not in cmd:
        return None
    key = hashlib.sha256(json.dumps(cmd).encode()).hexdigest()[:16]
    return cmd, Path(cache_dir) / "pch" / key, key


def pch_ready(cache_dir: str, extra_cflags: list[str],
              extra_include_paths: list[str]) -> tuple[str | None, bool]:
    """(the include dir of a header built for these flags, else None; whether one could still be
    made: none built, none failed), without building."""
    place = _pch_place(cache_dir, extra_cflags, extra_include_paths)
    if place is None:
        return None, False
    root = place[1]
    if (root / "torch" / "extension.h.gch").exists() and (root / "torch" / "extension.h").exists():
        return str(root), False
    return None, not (root / "failed.txt").exists()


def ensure_pch(cache_dir: str, extra_cflags: list[str], extra_include_paths: list[str]) -> str | None:
    """An include dir holding torch/extension.h.gch for these flags, built once (under a lock,
    atomically) and shared by every build that uses the same flags; None if it cannot be had."""
    root, missing = pch_ready(cache_dir, extra_cflags, extra_include_paths)
    if root is not None or not missing:
        return root
    place = _pch_place(cache_dir, extra_cflags, extra_include_paths)
    assert place is not None
    cmd, root_dir, key = place
    try:
        return _build_pch(cmd, Path(cache_dir) / "pch" / f"{key}.lock", root_dir)
    except OSError:  # a cache this process may not write (an evaluation's scratch build): none
        return None


def _build_pch(cmd: list[str], lock: Path, root: Path) -> str | None:
    gch = root / "torch" / "extension.h.gch"
    failed = root / "failed.txt"
    forward = root / "torch" / "extension.h"
    with _locked(lock):
        gch.parent.mkdir(parents=True, exist_ok=True)
        if not forward.exists():
            # GCC wants the header beside its .gch; where the .gch does not fit a build's
            # flags, this one hands over to the real header further down the search path.
            tmp = forward.with_name(f"extension.h.{os.getpid()}.tmp")
            tmp.write_text("#pragma once\n#include_next <torch/extension.h>\n")
            os.replace(tmp, forward)
        if gch.exists():
            return str(root)
        tmp = gch.with_name(f"extension.h.gch.{os.getpid()}.tmp")
        out = cmd.index("-o") + 1
        proc = subprocess.run([*cmd[:out], str(tmp), *cmd[out + 1:]], capture_output=True, text=True)
        if proc.returncode != 0:
            failed.write_text(proc.stdout[-4000:] + proc.stderr[-4000:])
            tmp.unlink(missing_ok=True)
            return None
        os.replace(tmp, gch)
    return str(root)


@functools.cache
def nvcc_archs() -> frozenset[int] | None:
    """The archs (75, 80, ...) the local nvcc can build, from `nvcc --list-gpu-arch`, else from
    its version and NVCC_MIN_ARCH (everything from the minimum up); None without an nvcc."""
    import shutil

    from torch.utils.cpp_extension import CUDA_HOME

    nvcc = os.path.join(CUDA_HOME, "bin", "nvcc") if CUDA_HOME else shutil.which("nvcc")
    if not nvcc or not os.path.exists(nvcc):
        return None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True, timeout=60)
        found = {int(m.group(2)) for m in _ARCH.finditer(out.stdout)}
        if out.returncode == 0 and found:
            return frozenset(found)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
        m = re.search(r"release (\d+)\.", out.stdout)
        if m and int(m.group(1)) in NVCC_MIN_ARCH:
            low = NVCC_MIN_ARCH[int(m.group(1))]
            return frozenset(range(low, 130))
    return None


def target_arch() -> int | None:
    """The arch this build is for: the highest in TORCH_CUDA_ARCH_LIST (what the engine gives
    both the compile pool and the GPU worker, so both rewrite alike), else the visible GPU's."""
    listed = [m.group(1) + m.group(2) for m in
              re.finditer(r"(\d+)\.(\d+)", os.environ.get("TORCH_CUDA_ARCH_LIST", ""))]
    if listed:
        return max(int(a) for a in listed)
    with contextlib.suppress(Exception):
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(0)
            return major * 10 + minor
    return None


def retarget_flags(flags: list[str], supported: frozenset[int] | set[int], target: int) -> list[str]:
    """`flags` with every sm_/compute_/lto_ NN the toolchain cannot build (not in `supported`)
    replaced by `target` (the device's own arch); repeated flags after the rewrite kept once.
    ("-arch=sm_70" -> "-arch=sm_90"; "-gencode arch=compute_70,code=sm_70" -> ..._90.)"""
    def one(flag: str) -> str:
        return _ARCH.sub(lambda m: m.group(0) if int(m.group(2)) in supported
                         else f"{m.group(1)}_{target}", flag)

    out: list[str] = []
    for i, flag in enumerate(flags):
        new = one(flag)
        prev = flags[i - 1] if i else ""
        pair = prev in ("-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code",
                        "--gpu-code")
        if not pair and new != flag and new in out:
            continue  # the same flag once
        out.append(new)
    return out


def _retarget(call: dict[str, Any]) -> None:
    """Rewrite the call's extra_cuda_cflags for this toolchain and device where they name an arch
    it cannot build; record and say so."""
    flags = list(call.get("extra_cuda_cflags") or [])
    if not flags or not any(_ARCH.search(f) for f in flags):
        return
    supported, target = nvcc_archs(), target_arch()
    if supported is None or target is None:
        return
    new = retarget_flags(flags, supported, target)
    if new == flags:
        return
    low = min(supported)
    why = (f"this nvcc builds sm_{low} and up; the device is sm_{target}")
    RETARGETED.append({"original": flags, "flags": new, "why": why})
    call["extra_cuda_cflags"] = new
    print(f"ktree: arch flags retargeted: {' '.join(flags)} -> {' '.join(new)} ({why})", file=sys.stderr)


def _as_list(sources: Any) -> list[str]:
    if sources is None:
        return []
    return [sources] if isinstance(sources, str) else list(sources)


def mini_call(call: dict[str, Any]) -> dict[str, Any] | None:
    """The load_inline call with the "mini" lever: the CUDA sources get ktree's header
    (engine/evaluate/harness/include/ktree_torch_min.h: the Tensor class, its methods, the usual factories,
    the dispatch macros, the torch:: dtype names) instead of <torch/types.h> and
    <torch/extension.h>; the C++ sources keep <torch/extension.h> (and the precompiled header),
    which load_inline would have prepended itself. None where the lever does not apply: no CUDA
    sources, or a call that chose its own headers (no_implicit_headers)."""
    cuda = _as_list(call.get("cuda_sources"))
    if not cuda or call.get("no_implicit_headers"):
        return None
    include = f"#include <{MINI_HEADER}>"
    return {**call, "no_implicit_headers": True,
            "cpp_sources": ["#include <torch/extension.h>", *_as_list(call["cpp_sources"])],
            "cuda_sources": [include, *(_TORCH_INCLUDE.sub(include, s) for s in cuda)],
            "extra_include_paths": [*(call.get("extra_include_paths") or []), MINI_INCLUDE_DIR]}


def _starts_with_extension_header(cpp_sources: list[str]) -> bool:
    for line in "\n".join(cpp_sources).splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        return bool(_EXTENSION_INCLUDE.match(stripped))
    return False


def slim_may_explain(log: str, identifiers: Any) -> bool:
    """Whether a failed build with the slim header might build with torch/extension.h. False
    only when the failure is plainly the source's own: errors in host files only, or a first
    CUDA error naming an identifier that torch/extension.h does not declare either (a typo such
    as an undeclared `warp_id`); `identifiers()` gives the names extension.h declares, or None.
    Anything else (other errors, an unknown name list) keeps the fallback: building twice costs
    time, a wrong compile_error would cost the variant."""
    cuda_errors = list(_NVCC_ERROR.finditer(log))
    if not cuda_errors:
        return not _GCC_ERROR.search(log)  # only host files failed: slim changed none of them
    m = _UNDEFINED.search(cuda_errors[0].group("msg"))
    if m is None:
        return True
    known = identifiers()
    return known is None or (m.group(1) or m.group(2)) in known


def extension_identifiers(cache_dir: str, extra_cflags: list[str],
                          extra_include_paths: list[str]) -> set[str] | None:
    """Every identifier that torch/extension.h and what it includes declare or define (macros
    too), from the preprocessed header with the flags torch's PCH command uses; computed once
    per command and kept in the build cache. None where it cannot be had."""
    cmd = torch_pch_command(extra_cflags, extra_include_paths)
    if cmd is None or "-o" not in cmd or "-x" not in cmd:
        return None
    key = hashlib.sha256(json.dumps(["identifiers", cmd]).encode()).hexdigest()[:16]
    path = Path(cache_dir) / "pch" / f"identifiers-{key}.txt"
    if not path.exists():
        out = cmd.index("-o")
        argv = [c for i, c in enumerate(cmd) if i not in (out, out + 1)]
        x = argv.index("-x")
        argv[x + 1] = "c++"  # preprocess the header as a source, keeping macro definitions
        proc = subprocess.run([*argv, "-E", "-dD", "-P"], capture_output=True, text=True)
        if proc.returncode != 0:
            return None
        names = sorted(set(re.findall(r"[A-Za-z_]\w*", proc.stdout)))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text("\n".join(names))
            os.replace(tmp, path)
        except OSError:  # a cache this process may not write: the names all the same
            return set(names)
    return set(path.read_text().split())


class ProbeBuilt(BaseException):  # noqa: N818  (a signal to the probe, not an error)
    """Raised by the wrapped load_inline / load in the compile pool's probe of ModelNew
    (engine.evaluate.languages.build_probe) once a call it had not seen has built: the probe's call of
    __init__ or forward stops there, before any kernel runs on its meta tensors, and starts again.
    A BaseException: a candidate's `except Exception` does not swallow it."""


# A build that the compile pool did not make, in an evaluation (which sees every build dir
# read-only): built into a scratch dir of this evaluation, made on first use and removed after it
# (`drop_scratch`); no other variant's evaluation reads it.
SCRATCH: dict[str, str | None] = {"dir": None}
# The compile pool's probe (engine.evaluate.languages.build_probe): "on" while it runs; "done": the
# call keys it has built; "notify": told "build" and "built" around each build (a build is never
# an idle probe).
PROBE: dict[str, Any] = {"on": False, "done": set(), "notify": None}
# The compiler output of each build that failed in this process since the last clear.
FAILED_BUILDS: list[str] = []
_FAILED_RECORD = "ktree-failed-{}.json"  # beside a build the compile pool could not make, by call key


def scratch_dir() -> str:
    """This evaluation's own writable build dir (under the process's temp dir: the sandbox's
    working dir), made on first use."""
    path = SCRATCH["dir"]
    if path is None or not os.path.isdir(path):
        path = SCRATCH["dir"] = tempfile.mkdtemp(prefix="ktree-scratch-")
    return path


def drop_scratch() -> None:
    """Remove this evaluation's scratch builds (the worker, between two evaluations)."""
    import shutil

    path, SCRATCH["dir"] = SCRATCH["dir"], None
    if path:
        shutil.rmtree(path, ignore_errors=True)


def _call_key(call: dict[str, Any], contents: list[str]) -> str:
    return hashlib.sha256(json.dumps([str(call.get(k)) for k in sorted(call)] + contents).encode()).hexdigest()


def _versioned(name: str, key: str) -> str:
    """The module name of this call: `name` for the first distinct call of that name in this
    process, then name_v1, name_v2, ... (each distinct call keeps its number, in the compile pool
    and in the evaluation alike, however often and in whatever order it is repeated)."""
    seen = PREBUILT["seen"].setdefault(name, [])
    if key not in seen:
        seen.append(key)
    version = seen.index(key)
    return name if version == 0 else f"{name}_v{version}"


def _sources_text(sources: Any) -> list[str]:
    """What `load`'s source files hold (a path that cannot be read: the path itself)."""
    out = []
    for path in _as_list(sources):
        try:
            out.append(Path(path).read_text(errors="replace"))
        except OSError:
            out.append(str(path))
    return out


def _placed(call: dict[str, Any], cache_dir: str, build: Any, contents: list[str],
            unkeyed: tuple[str, ...] = ()) -> Any:
    """One load_inline / load call, wherever the candidate makes it (at import, in __init__, in a
    helper, in forward) and whatever `build_directory` it names: built into the source's build dir
    (TORCH_EXTENSIONS_DIR: the compile pool writes it), or in an evaluation imported from there,
    or where the compile pool did not build it, built into this evaluation's scratch dir.
    `build(call, ext_dir)` builds with the levers. The call's own build_directory is not used: the
    compile pool's would be gone (its working dir) and the evaluation may not write the cache."""
    call["build_directory"] = None
    name = call["name"]
    ext_dir = os.environ.get("TORCH_EXTENSIONS_DIR") or cache_dir
    _retarget(call)
    key = _call_key({k: v for k, v in call.items() if k not in unkeyed}, contents)
    full = _versioned(name, key)
    if PREBUILT["on"]:
        found = _prebuilt(ext_dir, name, full, call.get("is_python_module", True))
        if found is not None:
            return found
        earlier = _read_json(os.path.join(ext_dir, _FAILED_RECORD.format(key[:24])))
        if earlier is not None and earlier.get("levers") == list(levers_from_env()):
            FAILED_BUILDS.append(str(earlier["log"]))
            raise RuntimeError(f"Error building extension '{name}' (in ktree's compile pool):\n"
                               f"{earlier['log']}")
        ext_dir = scratch_dir()
        print(f"ktree: building extension {name!r} in this evaluation's scratch dir (the compile pool"
              " did not build it: its call was not reached there)", file=sys.stderr)
    directory = os.path.join(ext_dir, name)
    os.makedirs(directory, exist_ok=True)
    notify = PROBE["notify"] if PROBE["on"] else None
    if notify:
        notify("build")
    try:
        result = build({**call, "name": full, "build_directory": directory}, ext_dir)
    except Exception as exc:
        if is_build_error(exc):
            text = _chain_text(exc)
            FAILED_BUILDS.append(text)
            if not PREBUILT["on"] and has_diagnostic(exc):  # the same call fails the same way
                _write_record(Path(ext_dir) / _FAILED_RECORD.format(key[:24]),
                              {"levers": list(levers_from_env()), "log": log_text(text)})
        raise
    finally:
        if notify:
            notify("built")
    if PROBE["on"] and key not in PROBE["done"]:
        PROBE["done"].add(key)
        raise ProbeBuilt(full)
    return result


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def install(cache_dir: str, levers: tuple[str, ...] | None = None) -> None:
    """Replace torch.utils.cpp_extension.load_inline (the levers, and where it builds: `_placed`)
    and load (where it builds) in this process."""
    import torch.utils.cpp_extension as ce

    levers = levers_from_env() if levers is None else levers
    if getattr(ce.load_inline, "_ktree_levers", None) is not None:
        return
    original = ce.load_inline
    signature = inspect.signature(original)
    # A build that does not ask for torch's PCH must not delete the one in torch's install
    # (possibly read-only, possibly used by another process): ours live in the build cache.
    ce.remove_extension_h_precompiler_headers = lambda: None

    def with_levers(call: dict[str, Any], record_dir: str) -> Any:
        name = call["name"]  # the versioned name (name, name_v1, ...)
        record = Path(record_dir) / f"ktree-levers-{name}.json"
        used: dict[str, Any] = _read_json(str(record)) or {}
        cpp = _as_list(call["cpp_sources"])
        cuda = _as_list(call.get("cuda_sources"))
        if "pch" in levers and not call.get("use_pch") and used.get("pch") is not False and (
            not call.get("no_implicit_headers") or _starts_with_extension_header(cpp)
        ):
            flags, includes = list(call.get("extra_cflags") or []), list(call.get("extra_include_paths") or [])
            if PCH_AHEAD["on"]:  # built beside this build, not before it
                root, missing = pch_ready(cache_dir, flags, includes)
                if root is None and missing:
                    PCH_AHEAD["wanted"].append({"extra_cflags": flags, "extra_include_paths": includes})
                    used["pch"] = False  # (this build's flags stay without it, wherever it is loaded)
            else:
                root = ensure_pch(cache_dir, flags, includes)
            if root is not None:
                call["extra_include_paths"] = [root, *includes]
                used["pch"] = True

        # Header levers, lightest first: "mini" (ktree's header), then "slim" (<torch/types.h>
        # for <torch/extension.h>), then the source as written. A build that fails where the
        # lighter header may be the cause falls through to the next; the choice is remembered.
        slim_cuda = [_EXTENSION_INCLUDE.sub("#include <torch/types.h>", s) for s in cuda]
        attempts = []
        mini = mini_call(call) if "mini" in levers else None
        if mini is not None and used.get("mini") is not False:
            attempts.append(("mini", mini))
        if "slim" in levers and slim_cuda != cuda and used.get("slim") is not False:
            attempts.append(("slim", {**call, "cuda_sources": slim_cuda}))
        for lever, attempt in attempts:
            try:
                result = original(**attempt)
            except Exception as exc:
                if not is_build_error(exc):
                    raise
                if not slim_may_explain(_chain_text(exc), lambda: extension_identifiers(
                        cache_dir, list(call.get("extra_cflags") or []),
                        list(call.get("extra_include_paths") or []))):
                    raise  # the source's own error: the full headers would fail the same way
                used[lever] = False
                # Build the fallback under the same version (and so the same file names) that
                # the GPU worker will ask for: its versioner has never seen this attempt.
                ce.JIT_EXTENSION_VERSIONER.entries.pop(name, None)
                print(f"ktree: {lever} CUDA headers failed to build; building with fuller headers",
                      file=sys.stderr)
            else:
                used[lever] = True
                _write_record(record, used)
                return result
        _write_record(record, used)
        return original(**call)

    def load_inline(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        call = dict(bound.arguments)
        call.update(call.pop("kwargs", None) or {})
        return _placed(call, cache_dir, with_levers, [])

    load_inline._ktree_levers = levers  # type: ignore[attr-defined]
    ce.load_inline = load_inline
    _install_load(ce, cache_dir)


def _install_load(ce: Any, cache_dir: str) -> None:
    """`load` (source files) placed as load_inline is, without the levers; its call key holds the
    files' text, so an evaluation finds what the compile pool built from the same text."""
    original = getattr(ce.load, "_ktree_original", ce.load)
    signature = inspect.signature(original)

    def load(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        call = dict(bound.arguments)
        call.update(call.pop("kwargs", None) or {})
        # Keyed by the files' text, not their paths (a temp dir's name differs from run to run).
        return _placed(call, cache_dir, lambda placed, _dir: original(**placed),
                       _sources_text(call.get("sources")), unkeyed=("sources",))

    load._ktree_original = original  # type: ignore[attr-defined]
    ce.load = load


def _prebuilt(extensions_dir: str, name: str, full: str, is_python_module: bool) -> Any:
    """The module the compile pool built for this call, imported without building; None where
    there is none."""
    import torch.utils.cpp_extension as ce

    directory = os.path.join(extensions_dir, name)
    if not os.path.exists(os.path.join(directory, f"{full}.so")):
        return None
    return ce._import_module_from_library(full, directory, is_python_module)


def _write_record(path: Path, used: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(used))


def as_compile_error(verdict: Any) -> Any:
    """An evaluation's verdict where a build failed in it (a load_inline in forward, say, built in
    the evaluation's scratch dir): `compile_error`, the compiler's first error line on top of its
    log, instead of the runtime_error of the exception that ended it."""
    import dataclasses

    if verdict.status != "runtime_error" or not FAILED_BUILDS:
        return verdict
    line = first_error(FAILED_BUILDS[0])
    log = verdict.log if not line or verdict.log.startswith(line) else f"{line}\n{verdict.log}"
    return dataclasses.replace(verdict, status="compile_error", log=log)


def main(argv: list[str]) -> int:
    """`python -m engine.evaluate.harness.fastbuild pch CACHE_DIR EXTRA_CFLAGS_JSON INCLUDE_PATHS_JSON`:
    the precompiled header for those flags, made once (engine.evaluate.host.pch_ahead starts it)."""
    from engine.evaluate.harness.timing import pin_cores

    pin_cores()  # the build cores, beside a pinned cpu timer
    if len(argv) != 5 or argv[1] != "pch":
        print("usage: python -m engine.evaluate.harness.fastbuild pch CACHE_DIR CFLAGS_JSON INCLUDES_JSON",
              file=sys.stderr)
        return 2
    return 0 if ensure_pch(argv[2], list(json.loads(argv[3])), list(json.loads(argv[4]))) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
