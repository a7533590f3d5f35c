"""`ktree bench compile`: what each compile lever saves, on this machine.

Every configuration builds in a fresh build cache, so nothing is a cache hit, except the
precompiled headers: built once up front (that one-time cost is reported on its own) and shared
by the configurations that use them, as a long-lived build cache would. The builds go through the
product's own compile step (a subprocess per build, GPUs hidden), one at a time unless asked
otherwise, and "wall" is what the pipeline pays per variant: process start, torch import, build
and load.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from engine import scripted_library
from engine.bench.summary import markdown_table, median
from engine.evaluate import make_job, run_child, scrubbed_env

HERE = Path(__file__).resolve().parents[1]  # engine/
SCRIPTED = scripted_library.ROOT
EXAMPLES = HERE / "templates" / "examples"
# Stock-structure kernels that build (each declares "Intended outcome: correct"): torch/extension.h
# in the sources, bindings made by load_inline. The scripted CUDA libraries are all in the ctypes
# structure now, so the CUDA ones are stock copies of three layernorm kernels kept among the examples;
# the CPU ones are the scripted softmax CPU library's.
STOCK = {"cuda": [EXAMPLES / "softmax_stock.py",
                  *(EXAMPLES / f"layernorm_stock_{k}.py" for k in ("split", "twopass", "onepass"))],
         "cpu": [SCRIPTED / "softmax" / "cpu" / f for f in ("online_1.py", "naive_1.py", "naive_2.py")]}
FAST_EXAMPLE = EXAMPLES / "softmax_fast.py"
CTYPES_EXAMPLE = EXAMPLES / "softmax_ctypes.py"

# (label, solution structure, levers)
CONFIGS = {
    "cuda": [
        ("stock, no lever", "stock", "none"),
        ("stock + pch", "stock", "pch"),
        ("stock + pch + slim", "stock", "pch,slim"),
        ("stock + pch + mini", "stock", "pch,slim,mini"),
        ("fast structure, no lever", "fast", "none"),
        ("fast structure + pch", "fast", "pch,slim"),
        ("raw launchers via ctypes", "ctypes", "none"),
    ],
    "cpu": [
        ("stock, no lever", "stock", "none"),
        ("stock + pch", "stock", "pch,slim"),
    ],
}


def _sources(backend: str, structure: str, n: int) -> list[str]:
    if structure in ("fast", "ctypes"):
        base = [(FAST_EXAMPLE if structure == "fast" else CTYPES_EXAMPLE).read_text()]
    else:
        base = [f.read_text() for f in STOCK[backend]]
    return [base[i % len(base)] for i in range(n)]


def _unique(source: str, tag: str) -> str:
    """The same kernel under a new build key (so a fresh build dir), C++ unchanged."""
    return f"{source}\n# ktree bench compile: {tag}\n"


async def _build(source: str, backend: str, cache: str, levers: str, arch: str, timeout: float) -> dict:
    job = make_job("", source, {}, backend=backend, cache_dir=cache, flops=None, bytes=None,
                   mode="compile")  # a build alone: no problem, no speed-of-light floor
    env = {"KTREE_BUILD_LEVERS": levers, "CUDA_VISIBLE_DEVICES": "", "MAX_JOBS": "2",
           "TORCH_CUDA_ARCH_LIST": arch if backend == "cuda" else ""}
    t0 = time.perf_counter()
    outcome, result, log = await run_child(job, timeout, env)
    wall = time.perf_counter() - t0
    status = (result or {}).get("status", outcome)
    return {"status": status, "wall_s": wall, "build_s": (result or {}).get("compile_s"),
            "log": "" if status == "compiled" else ((result or {}).get("log") or log)[-600:]}


async def _build_pch(cache: str, flag_sets: list[list[str]], backend: str, arch: str) -> float:
    """Build the precompiled headers these flag sets need, in a subprocess like a build."""
    code = ("import sys, json; from engine.evaluate.harness import fastbuild\n"
            "for flags in json.loads(sys.argv[2]): fastbuild.ensure_pch(sys.argv[1], flags, [])")
    env = scrubbed_env({"CUDA_VISIBLE_DEVICES": "", "TORCH_CUDA_ARCH_LIST": arch if backend == "cuda" else ""})
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, cache, json.dumps(flag_sets),
                                                env=env)
    await proc.wait()
    return time.perf_counter() - t0


def _cflag_sets(sources: list[str]) -> list[list[str]]:
    """The extra_cflags the sources pass (as written), for the PCHs to build up front: no flags
    only for a source that passes none (each header costs a build of torch/extension.h)."""
    found: set[tuple[str, ...]] = set()
    for src in sources:
        passed = [tuple(re.findall(r'"([^"]+)"', m))
                  for m in re.findall(r"extra_cflags\s*=\s*\[([^\]]*)\]", src)]
        found.update(passed or [()])
    return [list(f) for f in sorted(found)]


async def compile_bench(backend: str, arch: str = "", sources: int = 2, concurrent: int = 16,
                        timeout: float = 600.0, parallel_configs: bool = False,
                        structures: list[str] | None = None) -> dict[str, Any]:
    """Median wall per build for each configuration (of the given solution structures); then
    `concurrent` distinct builds of the last configuration at once (wall for the batch)."""
    nonce = f"{os.getpid()}-{time.time_ns()}"
    configs = [c for c in CONFIGS[backend] if not structures or c[1] in structures]
    pch_cache = tempfile.mkdtemp(prefix="ktree-bench-pch-")
    os.makedirs(os.path.join(pch_cache, "pch"))
    every_source = [src for _, structure, levers in configs if "pch" in levers
                    for src in _sources(backend, structure, sources)]
    pch_s = await _build_pch(pch_cache, _cflag_sets(every_source), backend, arch) if every_source else 0.0

    async def config(label: str, structure: str, levers: str) -> dict[str, Any]:
        cache = tempfile.mkdtemp(prefix="ktree-bench-compile-")
        # Hard links, not a symlink: under strict isolation a build sees only its cache dir.
        shutil.copytree(os.path.join(pch_cache, "pch"), os.path.join(cache, "pch"), copy_function=os.link)
        row: dict[str, Any] = {"config": label, "structure": structure, "levers": levers, "_cache": cache}
        builds = []
        for i, src in enumerate(_sources(backend, structure, sources)):
            builds.append(await _build(_unique(src, f"{label} {i} {nonce}"), backend, cache, levers,
                                       arch, timeout))
        ok = [b["wall_s"] for b in builds if b["status"] == "compiled"]
        row.update(builds=len(builds), compiled=len(ok),
                   median_wall_s=median(ok, 2),
                   walls_s=[round(b["wall_s"], 2) for b in builds],
                   errors=[b["log"] for b in builds if b["status"] != "compiled"][:1])
        return row

    if parallel_configs:
        rows = list(await asyncio.gather(*(config(*c) for c in configs)))
    else:
        rows = [await config(*c) for c in configs]

    batch: dict[str, Any] | None = None
    if concurrent > 0:
        label, structure, levers = configs[-1]
        cache = next(r["_cache"] for r in rows if r["config"] == label)
        srcs = [_unique(s, f"batch {i} {nonce}")
                for i, s in enumerate(_sources(backend, structure, concurrent))]
        t0 = time.perf_counter()
        results = await asyncio.gather(*(_build(s, backend, cache, levers, arch, timeout) for s in srcs))
        batch = {"config": label, "builds": concurrent,
                 "compiled": sum(r["status"] == "compiled" for r in results),
                 "wall_s": round(time.perf_counter() - t0, 2),
                 "each_s": sorted(round(r["wall_s"], 2) for r in results)}
    for r in rows:
        shutil.rmtree(r.pop("_cache"), ignore_errors=True)
    shutil.rmtree(pch_cache, ignore_errors=True)
    return {"backend": backend, "cores": os.cpu_count(), "parallel_configs": parallel_configs,
            "pch_build_s": round(pch_s, 2), "configs": rows, "concurrent": batch}


def compile_table(result: dict[str, Any]) -> str:
    lines = [f"compile bench on {result['backend']} ({result['cores']} cores;"
             f" configurations {'side by side' if result['parallel_configs'] else 'one after another'})",
             "",
             f"precompiled headers, built once up front: {result['pch_build_s']} s", "",
             markdown_table(("configuration", "levers", "builds ok", "median wall s", "walls s"),
                            [(r["config"], r["levers"], f"{r['compiled']}/{r['builds']}", r["median_wall_s"],
                              ", ".join(map(str, r["walls_s"]))) for r in result["configs"]])]
    b = result.get("concurrent")
    if b:
        lines += ["", f"{b['builds']} concurrent builds ({b['config']}): {b['compiled']} ok,"
                      f" {b['wall_s']} s wall; each {b['each_s'][0]}-{b['each_s'][-1]} s"]
    for r in result["configs"]:
        for e in r["errors"]:
            lines += ["", f"{r['config']}: first error:", e]
    return "\n".join(lines)
