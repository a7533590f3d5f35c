"""What a kernel language is to ktree: one object per language (engine.evaluate.languages), asked
by every part that differs between languages, so that a new language is one module.

- the engine: how a source is told to be in it (`detects`), what it is called (`label`, `mark` in
  the tree), whether a file is Python through and through (the code pane highlights it whole),
  what must be importable for a search in it (`requires`), the prompt's contract
  (`contract_template`) and the fix prompt's words (`fix_words`), whether its build makes ktree's
  precompiled torch header (`precompiled_header`: the TUI says so on a cold cache), the scripted
  library's dir for it (`library_dir`) and how the scripted provider tells a prompt asks for it
  (`contract_mark`), the evaluation's floor on its time limit (`eval_floor_s`), the worker's
  environment (`process_env`);
- the evaluation child: how a solution is built and imported (`load`), what its first call does
  before anything is checked or timed (`first_call`), what may be done before the device's lock
  (`prewarm`), and which failures are compile errors (`failure_status`).

Torch and the standard library only, like all of engine.evaluate. (A `job` here is an
engine.evaluate.jobs.EvalJob, not imported: the job module asks this package for a job's language.)
"""

from __future__ import annotations

from typing import Any


class Language:
    name: str = ""
    title: str = ""
    mark: str = ""  # shown before a variant's title in the tree ("" for the default language)
    python_only: bool = False  # the whole file is Python (no C++ or CUDA in strings)
    requires: str | None = None  # a module a search in this language needs importable
    contract_mark: str = ""  # a phrase only this language's contract holds
    first_call_limit_s: float = 240.0
    eval_floor_s: float | None = None  # None: the backend's floor (engine.evaluate.host.eval_limit)
    fix_words: tuple[str, str] = ("failed to build", "Compiler output (tail)")
    precompiled_header: bool = False  # its build includes ktree's precompiled torch header
    build_words: str = "build"  # what a variant's build is called in a bench's table

    def detects(self, source: str) -> bool:
        """Whether a solution's source is written in this language (the default one answers for
        every source no other language claims)."""
        raise NotImplementedError

    def label(self, backend: str) -> str:
        return self.title

    def contract_template(self, backend: str) -> str:
        """The template (engine/templates) holding the solution contract for this language."""
        raise NotImplementedError

    def contract_text(self, backend: str) -> str | None:
        """The contract itself (a string.Template; `$tol` is the tolerance), for a language whose
        module carries it; None: read `contract_template` from engine/templates."""
        return None

    def library_dir(self, backend: str) -> str:
        """The scripted library's dir for this language on `backend` (engine.scripted_library's
        rule: the language's name; the default language's is the backend's own)."""
        return self.name

    def process_env(self, backend: str) -> dict[str, str]:
        """Variables an evaluation process needs set before anything is imported."""
        return {}

    def load(self, job: Any, key: str, build_dir: str) -> Any:
        """Build (or reuse) and import the solution; EvalFailure with its status on failure."""
        raise NotImplementedError

    def first_call(self, module: Any, new: Any, problem: Any, device: str, seed: int) -> dict[str, Any] | None:
        """Anything the first call must do outside the timed window (a JIT); its report or None."""
        return None

    def prewarms(self, backend: str) -> bool:
        """Whether `prewarm` does anything worth a request before the device's lock."""
        return False

    def prewarm(self, job: Any) -> dict[str, Any]:
        return {}

    def failure_status(self, exc: BaseException) -> str:
        """The verdict status of an exception raised while loading or on the first call."""
        return "runtime_error"
