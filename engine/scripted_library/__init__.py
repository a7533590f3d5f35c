"""The scripted library: canned ideas and kernels, written in this repo, with which the offline
`scripted` provider (engine.llm.scripted) answers the method's prompts. Data, not code of the app.

Layout, one folder a problem: <problem>/ideas.toml (the ideas: key, title, description; an idea's
[idea.cpu] table words it as its cpu kernels do it, with no GPU's threads, blocks or float4), and per
language dir <problem>/<dir>/<idea key>_<n>.py, where <dir> is the backend for C++/CUDA
(`load_inline`) kernels (`cpu`, `cuda`) or `triton` for Triton ones (they run on either backend:
on the cpu one under Triton's interpreter). The corrected version of a variant that fails to
build, for the fix prompt: <dir>/fixes/<same name>.

`answers` is the one way the library is read; `available` says which problems it answers, so the
provider's error, `ktree problems` and the estimate give the same list. Each kernel's docstring ends
with an "Intended outcome:" line, for the library's tests and benches; `answered` is a kernel's text
as the scripted model hands it out, without it (a user reads the rest in the code pane and exports).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parent


OUTCOME_AT_END = re.compile(r'\n\nIntended outcome:[^\n]*\n(?=""")')  # the docstring's last paragraph
OUTCOME = re.compile(r"^Intended outcome:[^\n]*\n\n?", re.M)  # one with more after it


def answered(path: Path) -> str:
    """A kernel file as the scripted model answers with it: less its "Intended outcome:" line."""
    return OUTCOME.sub("", OUTCOME_AT_END.sub("\n", path.read_text()))


class NoAnswers(LookupError):
    """The library has no answers for this problem in this language dir."""


@dataclass(frozen=True)
class ScriptedIdea:
    key: str
    title: str
    description: str
    variants: tuple[Path, ...]  # the kernel files implementing it, in name order


def language_dir(backend: str, language: str) -> str:
    """The dir a variant in `language` on `backend` comes from: the backend's own (cpu, cuda) for
    the default language's load_inline kernels, a dir named after any other (triton); the same
    rule as engine.evaluate.languages' `library_dir` (this package imports nothing of the app)."""
    return backend if language == "cuda" else language


def available(backend: str | None = None, language: str = "cuda") -> list[str]:
    """The problems the library answers: with no backend, every problem with an idea list; with
    one, those with kernels in `language` on that backend (what a search there can be given)."""
    problems = sorted(p.name for p in ROOT.iterdir() if (p / "ideas.toml").is_file())
    if backend is None:
        return problems
    folder = language_dir(backend, language)
    return [p for p in problems if any((ROOT / p / folder).glob("*_*.py"))]


def answers(problem: str, folder: str) -> list[ScriptedIdea]:
    """The ideas of `problem` that have kernels in the language dir `folder` (cpu, cuda, triton),
    each with its files. NoAnswers, saying what the library has instead, when there are none."""
    index = ROOT / problem / "ideas.toml"
    ideas = []
    if index.is_file():
        for item in tomllib.loads(index.read_text())["idea"]:
            files = tuple(sorted((ROOT / problem / folder).glob(f"{item['key']}_*.py")))
            said = {**item, **item.get(folder, {})}  # (an [idea.cpu] table: the cpu kernels' own words)
            if files:
                ideas.append(ScriptedIdea(item["key"], said["title"], said["description"].strip(), files))
    if not ideas:
        kind, have = ((folder, available(folder, "cuda")) if folder in ("cpu", "cuda")
                      else (folder.title(), available("cuda", folder)))
        raise NoAnswers(f"the scripted provider has no {kind} answers for {problem!r}"
                        f" (it has: {', '.join(have) or 'none'})")
    return ideas

