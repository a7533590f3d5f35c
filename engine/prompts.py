"""The method's prompts (templates in engine/templates/, readable by users) and reply parsing.

Parsing is forgiving about form and strict about content: a reply that yields no idea or no code
raises ReplyError, which the search records as a failed node with the reason.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from string import Template

from engine.domain import library_line, shown_notes
from engine.evaluate import BOUND_LABELS, Verdict, languages, size_constants, summary_lines

TEMPLATES = Path(__file__).parent / "templates"
IMPLEMENT_HEADER = "## Idea to implement"
TRIED_HEADER = "## Ideas already tried on this branch"
FIX_HEADER = "## The failing solution"


class ReplyError(ValueError):
    """An LLM reply that could not be turned into ideas or code."""


class NoIdeas(ReplyError):
    """A well-formed reply that proposes nothing: an empty JSON list. `said`: the reply's words
    around it (why, where the model says so)."""

    def __init__(self, message: str, said: str = "") -> None:
        super().__init__(message)
        self.said = said

    @property
    def title(self) -> str:
        """The node's title: why in short where the reply says it (its first clause), so the tree
        and `show` tell "every idea tried" from a model that failed."""
        why = re.split(r"[:.]\s", self.said.strip(), maxsplit=1)[0].strip().rstrip(".:")
        if not why:
            return "(no ideas returned)"
        return f"(no ideas: {why[0].lower()}{why[1:120]})"


@dataclass(frozen=True)
class IdeaText:
    title: str
    description: str


def _template(name: str) -> Template:
    return Template((TEMPLATES / name).read_text())


def machine(backend: str) -> str:
    """What the prompts' engineer is an expert on: the backend's hardware."""
    return "CPU" if backend == "cpu" else "GPU"


def sized_source(source: str, sizes: Mapping[str, int] | None) -> str:
    """The problem file as this run uses it: each module-level size constant the run sets to
    another value (the cpu backend's `cpu_sizes`) rewritten to that value, with the file's own in a
    comment, so a model tunes for the sizes it will be timed at."""
    if not sizes:
        return source
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    own = size_constants(source)
    lines = source.splitlines()
    for node in reversed(tree.body):
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if not isinstance(target, ast.Name) or node.end_lineno is None:
            continue
        name = target.id
        if name in sizes and name in own and sizes[name] != own[name]:
            note = f"# this run's size (the file's own, {own[name]}, is for the GPU)"
            lines[node.lineno - 1:node.end_lineno] = [f"{name} = {sizes[name]}  {note}"]
    return "\n".join(lines) + ("\n" if source.endswith("\n") else "")


def describe_verdict(verdict: Verdict | None, ref_ms: float | None = None) -> str:
    """The parent's measurements as the idea prompt shows them."""
    if verdict is None:
        if ref_ms:
            return f"This is the PyTorch reference itself: {ref_ms:.4g} ms (eager)."
        return "This is the PyTorch reference itself; no measurement yet."
    v = verdict
    lines = [f"- status: {v.status}"]
    if v.time_ms is not None:
        lines.append(
            f"- median time: {v.time_ms:.4g} ms (p10 {v.time_p10_ms or 0:.4g},"
            f" p90 {v.time_p90_ms or 0:.4g})"
        )
    if v.ref_eager_ms is not None:
        lines.append(f"- PyTorch eager reference: {v.ref_eager_ms:.4g} ms")
    if v.speedup_eager is not None:
        lines.append(f"- speedup vs eager: {v.speedup_eager:.3g}x")
    if v.speedup_compile is not None:
        lines.append(f"- speedup vs torch.compile: {v.speedup_compile:.3g}x")
    if v.max_abs_err is not None:
        lines.append(f"- max abs error vs fp64 reference: {v.max_abs_err:.3g}")
    if v.sol_fraction is not None:
        lines.append(f"- fraction of speed-of-light: {v.sol_fraction:.1%}")
    if v.library:
        lines.append(f"- library: {library_line(v.library)} left to torch/cuDNN/cuBLAS; its own kernels"
                     " do the rest (correct, but the main op is not its own kernel)")
    lines += [f"- note: {note}" for note in shown_notes(v.notes, v.library)]
    lines += describe_profile(v)
    if v.status != "correct" and v.log:
        lines.append("- log tail:\n" + v.log[-1500:])
    return "\n".join(lines)


def describe_profile(verdict: Verdict) -> list[str]:
    """Why the parent is slow, in a few lines: its diagnosis, its top kernels, the reference's."""
    profile = verdict.profile or {}
    lines = summary_lines(profile)
    if not lines:
        return []
    out = [f"- {lines[0]}"]
    if len(lines) > 1:
        out.append("- top kernels:")
        out += lines[1:]
    ref = (profile.get("reference") or {}).get("diagnosis")
    if ref:
        label = BOUND_LABELS.get(ref.get("bound"), ref.get("bound"))
        out.append(f"- the PyTorch reference, same profiler: {label} — {ref.get('evidence', '')}")
    return out


def idea_prompt(
    problem_source: str,
    parent_source: str,
    parent_verdict: str,
    tried: list[str],
    k: int,
    backend: str,
    sizes: Mapping[str, int] | None = None,
) -> str:
    """The idea prompt. `sizes`: the run's size constants (the problem's source, and a parent that
    is the reference itself, are shown at them)."""
    return _template("idea.txt").substitute(
        machine=machine(backend),
        problem_source=sized_source(problem_source, sizes).strip(),
        sizes_note=sizes_note(problem_source, sizes),
        parent_source=_parent(parent_source, problem_source, sizes),
        parent_verdict=parent_verdict,
        tried="\n".join(f"- {t}" for t in tried) if tried else "(none yet)",
        k=k,
        backend=backend,
    )


def contract(backend: str, language: str, tol: float) -> str:
    """The solution contract for a variant in its kernel language (engine.evaluate.languages:
    Triton's on either backend, its kernels interpreted on the cpu; CUDA C++'s load_inline one
    per backend)."""
    lang = languages.get(language)
    text = lang.contract_text(backend)
    template = Template(text) if text is not None else _template(lang.contract_template(backend))
    return template.substitute(tol=f"{tol:g}")


def sizes_note(source: str, sizes: Mapping[str, int] | None) -> str:
    """A line under the problem where the run's sizes are not the file's (its docstring may still
    speak of the file's), else nothing."""
    own = size_constants(source) if sizes else {}
    changed = {k: v for k, v in (sizes or {}).items() if k in own and own[k] != v}
    if not changed:
        return ""
    said = ", ".join(f"{k} = {v}" for k, v in (sizes or {}).items() if k in own)
    return f"This run times it at {said}, not the file's own sizes (those are for a GPU): tune for these.\n"


def _parent(parent_source: str, problem_source: str, sizes: Mapping[str, int] | None) -> str:
    """A parent's source as a prompt shows it: the reference at the run's sizes, a variant as written."""
    same = parent_source.strip() == problem_source.strip()
    return (sized_source(parent_source, sizes) if same else parent_source).strip()


def implement_prompt(
    problem_source: str, parent_source: str, idea: IdeaText, backend: str, tol: float,
    language: str = languages.DEFAULT, sizes: Mapping[str, int] | None = None,
) -> str:
    """The implementation prompt. The parent may be in another language than the one asked for
    (a mixed tree): the contract says which language to write. `sizes`: as for idea_prompt."""
    return _template("implement.txt").substitute(
        machine=machine(backend),
        problem_source=sized_source(problem_source, sizes).strip(),
        sizes_note=sizes_note(problem_source, sizes),
        parent_source=_parent(parent_source, problem_source, sizes),
        idea_title=idea.title,
        idea_description=idea.description,
        contract=contract(backend, language, tol).strip(),
    )


def fix_prompt(problem_source: str, source: str, idea_title: str, log: str, backend: str,
               tol: float, sanitizer: str = "", language: str = languages.DEFAULT,
               sizes: Mapping[str, int] | None = None) -> str:
    """The fix prompt for a variant that failed to build (in its language's words: CUDA's compiler
    output, Triton's JIT error raised at the first call), or (with `sanitizer`: compute-sanitizer's report)
    for a run that hit an illegal or misaligned memory access."""
    if sanitizer:
        failure = "crashed at run time with an illegal memory access"
        heading = "Run-time error and compute-sanitizer (memcheck) report"
        error = log.split("\n\ncompute-sanitizer", 1)[0].strip()[-2000:]
        log = f"{error}\n\n{sanitizer.strip()}"
    else:
        failure, heading = languages.get(language).fix_words
    return _template("fix.txt").substitute(
        machine=machine(backend),
        problem_source=sized_source(problem_source, sizes).strip(),
        sizes_note=sizes_note(problem_source, sizes),
        idea_title=idea_title,
        source=source.strip(),
        failure=failure,
        log_heading=heading,
        log=log.strip()[-4000:],
        contract=contract(backend, language, tol).strip(),
    )


_NUMBERED = re.compile(r"^\s*(?:\d+[.)]|[-*])\s+(.*)$")


def parse_ideas(text: str) -> list[IdeaText]:
    """Ideas from a JSON list (possibly fenced or wrapped in prose) or a numbered list."""
    ideas = _ideas_from_json(text)
    if not ideas:
        ideas = _ideas_from_list(text)
    if not ideas and _empty_json_list(text):
        around = text[:text.find("[")] + " " + text[text.rfind("]") + 1:]
        said = " ".join(re.sub(r"```\w*", " ", around).split())  # (its fences are no words)
        raise NoIdeas("the LLM returned an empty list of ideas ([])"
                      + (f", saying: {said[:400]}" if said else ""), said[:400])
    if not ideas:
        raise ReplyError("the reply holds no ideas (neither a JSON list nor a numbered list)")
    return ideas


def _empty_json_list(text: str) -> bool:
    start, end = text.find("["), text.rfind("]")
    try:
        return start >= 0 and json.loads(text[start : end + 1]) == []
    except json.JSONDecodeError:
        return False


def _ideas_from_json(text: str) -> list[IdeaText]:
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end <= start:
        return []
    try:
        data = json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return []
    ideas = []
    for item in data if isinstance(data, list) else []:
        if isinstance(item, dict) and str(item.get("title", "")).strip():
            ideas.append(
                IdeaText(str(item["title"]).strip(), str(item.get("description", "")).strip())
            )
    return ideas


def _ideas_from_list(text: str) -> list[IdeaText]:
    ideas: list[list[str]] = []
    for line in text.splitlines():
        m = _NUMBERED.match(line)
        if m and re.match(r"^\s*\d+[.)]", line):
            ideas.append([m.group(1)])
        elif ideas and line.strip():
            ideas[-1].append(line.strip())
    result = []
    for parts in ideas:
        head = parts[0].replace("**", "").strip()
        m = re.match(r"^(.*?)(?:\s[-—–]\s|:\s)(.*)$", head)
        title, first = (m.group(1), m.group(2)) if m else (head, "")
        description = " ".join(p for p in [first.strip(), *parts[1:]] if p)
        if title.strip():
            result.append(IdeaText(title.strip(), description))
    return result


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def extract_code(text: str) -> str:
    """The last fenced code block (python preferred) that defines ModelNew."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    for lang, body in reversed(blocks):
        if lang in ("python", "py", "") and "ModelNew" in body:
            return body.strip() + "\n"
    if blocks:
        raise ReplyError("the reply's code blocks define no ModelNew")
    raise ReplyError("the reply holds no fenced code block")
