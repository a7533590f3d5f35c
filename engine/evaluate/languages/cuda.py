"""CUDA C++ (and C++ on the cpu backend): a `torch.utils.cpp_extension.load_inline` extension
built from the solution's strings, through ktree's compile levers (engine.evaluate.harness.fastbuild). The
default language: every source no other language claims.

Runs in the child's process; torch and the standard library only.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from engine.evaluate.build_errors import REUSED_BUILD_ERROR
from engine.evaluate.jobs import EvalJob
from engine.evaluate.languages import build_probe
from engine.evaluate.languages.base import Language
from engine.evaluate.languages.common import EvalFailure, build_dir_lock, format_exc, read_json, write_json
from engine.evaluate.loading import load_module_from_source


class CudaCpp(Language):
    name = "cuda"
    title = "CUDA C++"
    precompiled_header = True

    def detects(self, source: str) -> bool:
        return True

    def label(self, backend: str) -> str:
        return "CUDA" if backend == "cuda" else "C++ (cpu)"

    def contract_template(self, backend: str) -> str:
        return f"contract_{backend}.txt"

    def library_dir(self, backend: str) -> str:
        return backend  # the default language's kernels sit under the backend's own dir

    def load(self, job: EvalJob, key: str, build_dir: str) -> Any:
        from engine.evaluate.harness import fastbuild

        os.environ["TORCH_EXTENSIONS_DIR"] = build_dir
        fastbuild.install(job.cache_dir)  # the same levers in the compile pool and the worker
        # An evaluation loads what the compile pool built (it may not write the build dirs);
        # what the pool did not build, it builds in a scratch dir of its own (fastbuild._placed).
        fastbuild.PREBUILT["on"] = job.mode == "evaluate"
        fastbuild.PREBUILT["seen"] = {}
        fastbuild.PROBE["on"] = False
        fastbuild.drop_scratch()
        failed = os.path.join(build_dir, "ktree-compile-error.json")
        levers = list(fastbuild.levers_from_env())
        fastbuild.RETARGETED.clear()
        try:
            with build_dir_lock(build_dir):
                earlier = read_json(failed)
                if earlier is not None and earlier.get("levers") == levers:
                    raise EvalFailure("compile_error", f"{earlier['log']}\n{REUSED_BUILD_ERROR} with the same"
                                      " compiler and flags: that result is reused)")
                try:
                    module = load_module_from_source(job.solution_source, f"ktree_solution_{key}")
                except Exception as exc:
                    if fastbuild.is_build_error(exc) and fastbuild.has_diagnostic(exc):
                        # The compiler said why: the same source fails the same way next time.
                        # (A build that failed without a diagnostic, killed say, is tried again.)
                        write_json(failed, {"levers": levers,
                                            "log": fastbuild.with_first_error(exc, format_exc(exc),
                                                                              job.solution_source)})
                    raise
                if job.mode == "compile" and build_probe.builds_in_functions(job.solution_source) \
                        and isinstance(getattr(module, "ModelNew", None), type):
                    # Builds in __init__, a helper or forward: made here too (languages.build_probe).
                    report = build_probe.probe(job, module)
                    print(f"ktree: build probe: built {report['built'] or 'nothing new'};"
                          f" stopped: {report['stopped']}", file=sys.stderr)
                    if report["error"]:
                        write_json(failed, {"levers": levers, "log": report["error"]})
                        raise EvalFailure("compile_error", report["error"])
        except EvalFailure:
            raise
        except SyntaxError as exc:
            raise EvalFailure("compile_error", f"Python syntax error: {exc}") from exc
        except Exception as exc:
            if fastbuild.is_build_error(exc):
                said = fastbuild.with_first_error(exc, format_exc(exc), job.solution_source)
                raise EvalFailure("compile_error", cuda_on_cpu_note(job, exc) + said) from exc
            raise EvalFailure("runtime_error", cuda_on_cpu_note(job, exc) + format_exc(exc)) from exc
        if not isinstance(getattr(module, "ModelNew", None), type):
            raise EvalFailure("runtime_error", "the solution defines no class ModelNew")
        return module


LANGUAGE = CudaCpp()


def cuda_on_cpu_note(job: EvalJob, exc: BaseException) -> str:
    """The first line of a CUDA solution's failure on the cpu backend, where no CUDA toolkit is
    expected ("CUDA_HOME is not set" alone tells a user nothing): what to do instead."""
    text = str(exc)
    cuda = "__global__" in job.solution_source or "cuda_sources" in job.solution_source
    if job.backend != "cuda" and cuda and ("CUDA_HOME" in text or "nvcc" in text or "cuda" in text.lower()):
        return ("a CUDA solution needs the cuda backend (a GPU): on the cpu backend solutions are C++"
                " (load_inline cpp_sources) or Triton, interpreted; see engine/templates/examples/cpu\n")
    return ""
