"""Text reports: a verdict in a line or two, sessions and problems as markdown tables.
Standard library only, so `ktree eval` and `ktree problems` need nothing beyond torch."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from engine.domain import (
    EAGER_BESIDE,
    EAGER_LATEST,
    LIBRARY_EXCLUDED,
    best_variant,
    excludes_library,
    language_label,
    language_mark,
    library_excluded,
    library_line,
    session_library_ops,
    shown_notes,
    where_label,
)
from engine.evaluate import BOUND_LABELS, REUSED_BUILD_ERROR, summary_lines
from engine.problems import DEGENERATE_LINE

if TYPE_CHECKING:
    from engine.evaluate import Verdict


def fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g} ms"


def fmt_x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def profile_line(profile: dict[str, Any]) -> str:
    """A profile in one line: the tool and the diagnosis, or why it could not be taken."""
    tool = profile.get("tool") or "?"
    if profile.get("error"):
        first = (str(profile["error"]).strip().splitlines() or [""])[0]
        return f"profile ({tool}) not taken: {first[:200]}"
    if tool == "off":
        return f"profile off ({profile.get('why', '')})"
    d = profile.get("diagnosis") or {}
    bound = BOUND_LABELS.get(str(d.get("bound")), str(d.get("bound") or "no diagnosis"))
    seconds = f" ({profile['seconds']:.1f} s)" if isinstance(profile.get("seconds"), (int, float)) else ""
    return f"profile ({tool}): {bound} — {d.get('evidence', '')}{seconds}"


# How a `library` mark is introduced in text (docs/verdicts.md): correct, the main op not its own.
LIBRARY_WORDS = "library (the reference's main op left to torch/cuDNN/cuBLAS, the rest in its own kernels)"


def status_label(status: str, library: object) -> str:
    """A status as the text tables show it: a library-marked correct one as "correct [lib]"."""
    return f"{status} [lib]" if library and status == "correct" else status


def format_verdict(v: Verdict) -> str:
    """A verdict in one or two lines (status, `[lib]` for a library mark, error, times, speedup,
    first log line)."""
    parts = [status_label(v.status, v.library)]
    if v.language and language_mark(v.language):  # told from the file; a JIT's first call
        jit = (v.jit or {}).get("jit_s")
        parts.append(language_label(v.language, v.backend or "cuda")
                     + (" (interpreted)" if (v.jit or {}).get("interpreted") else "")
                     + (f", JIT {jit:.2f} s" if jit is not None else ""))
    if v.max_abs_err is not None:
        parts.append(f"max abs err {v.max_abs_err:.3g}")
    if v.time_ms is not None:
        parts.append(f"{fmt_ms(v.time_ms)} (p10 {fmt_ms(v.time_p10_ms)},"
                     f" p90 {fmt_ms(v.time_p90_ms)})")
    if v.ref_eager_ms is not None:
        parts.append(f"eager {fmt_ms(v.ref_eager_ms)} {EAGER_BESIDE}")
    if v.speedup_eager is not None:
        parts.append(f"speedup {fmt_x(v.speedup_eager)}")
    if (v.gpu or {}).get("slot"):  # which device measured it
        parts.append(f"on {v.gpu['slot']}")
    line = ", ".join(parts)
    for flag in v.flags or ():
        line += f"\n    flag: {flag[:200]}"
    if v.library:
        line += f"\n    {LIBRARY_WORDS}: {library_line(v.library)}"
    for note in shown_notes(v.notes, v.library):
        line += f"\n    note: {note[:240]}"
    for why in why_not_correct(v):
        line += f"\n    {why}"
    if v.sanitizer:
        report = "\n".join(f"      {ln}" for ln in v.sanitizer.splitlines())
        line += f"\n    compute-sanitizer (memcheck):\n{report}"
    profile = v.profile or {}
    if profile.get("tool") == "off":
        line += f"\n    profile: off ({profile.get('why', '')})"
    for text in summary_lines(profile):
        line += f"\n    {text}"
    if profile.get("why") and profile.get("tool") != "off":
        line += f"\n    ({profile['why']})"
    return line


def why_not_correct(v: Verdict) -> list[str]:
    """A verdict that is not correct, in a line or two: the compiler's own first error (not ninja's
    last words; a reused result says so after it), else the log's last line (the mismatch, the
    exception)."""
    if v.status in ("correct", "flagged") or not v.log:
        return []
    error = v.log.split("\n\ncompute-sanitizer", 1)[0]
    first = next((ln for ln in reversed(error.strip().splitlines()) if ln.strip()), "")
    compiler = v.compiler_error
    if not compiler:
        return [first[:200]]
    return [compiler[:300], *([first[:200]] if first.startswith(REUSED_BUILD_ERROR) else [])]


def eval_table(rows: list[tuple[str, Verdict]]) -> str:
    """`ktree eval` of several solutions: one row per solution (file, status, time, speedup vs
    eager, max abs error, flags), aligned columns; under a solution that is not correct, why (the
    compiler's line, the mismatch)."""
    head = ("file", "status", "ms", "speedup", "max abs err", "bound", "flags")
    body = []
    for file, v in rows:
        err, ms = v.max_abs_err, v.time_ms
        flags = "; ".join(f.split(":")[0] for f in v.flags)
        body.append((file, status_label(v.status, v.library), "-" if ms is None else f"{ms:.4g}",
                     fmt_x(v.speedup_eager),
                     "-" if err is None else f"{err:.3g}", v.bound or "-", flags or "-"))
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]

    def line(r: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()

    out = [line(head)]
    for r, (_, v) in zip(body, rows, strict=True):
        out += [line(r), *(f"    {why}" for why in why_not_correct(v))]
    return "\n".join(out)


def format_session_row(row: dict[str, Any]) -> str:
    started = datetime.fromtimestamp(row["created_at"]).strftime("%Y-%m-%d %H:%M")
    best = fmt_x(row.get("best_speedup"))
    return (f"#{row['id']:<4} {row['problem']:<14} {row['backend']:<4} {row['provider']:<10}"
            f" {started}  {row.get('variants', 0):>3} variants  best {best:>7}  {row['status']}")


def session_table(session: dict[str, Any], variants: list[dict[str, Any]]) -> str:
    """A session's variants as a markdown table, with a header line naming what ran where."""
    sizes = ", ".join(f"{k}={v}" for k, v in session["sizes"].items())
    device = next((v["device"] for v in variants if v.get("device")), session["backend"])
    lines = [
        f"Session {session['id']}: {session['problem']} on {where_label(session['backend'], device)} [{sizes}],"
        f" provider {session['provider']}, {session['status']}, best {fmt_x(session.get('best_speedup'))}",
        "",
        f"| variant | round | idea | status | ms | eager ms ({EAGER_BESIDE}) | speedup vs eager | max abs err"
        " | on |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for v in variants:
        err = "-" if v.get("max_abs_err") is None else f"{v['max_abs_err']:.2g}"
        star = " ★" if v.get("best") else ""
        lines.append(
            f"| {v['node']}{star} | {v['round']} | {v['idea']} | {status_label(v['status'], v.get('library'))}"
            f" | {_num(v.get('time_ms'))}"
            f" | {_num(v.get('ref_eager_ms'))} | {fmt_x(v.get('speedup_eager'))} | {err}"
            f" | {v.get('slot') or '-'} |"
        )
    return "\n".join(lines)


def problems_table(rows: list[dict[str, Any]], backend: str, device: str) -> str:
    """`ktree problems`: one row a problem, at the sizes this machine's backend runs; reference
    times as cached for this device."""
    preset = " (the CPU size presets)" if backend == "cpu" else ""
    lines = [f"Problems on {backend}{preset}; reference times measured on {device}: eager as the latest"
             f" search last timed it ({EAGER_LATEST}) or by `ktree bench timing`, torch.compile by"
             " `ktree bench timing` only", "",
             "| name | level | sizes | FLOPs | bytes | eager ms | torch.compile ms | scripted |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        sizes = ", ".join(f"{k}={v}" for k, v in r["sizes"].items())
        cost = r["cost"]
        est = " (est.)" if cost.estimated else ""
        name = f"{r['name']} (degenerate)" if r.get("degenerate") else r["name"]
        lines.append(f"| {name} | {r['level'] or '-'} | {sizes} | {_sci(cost.flops)}{est} |"
                     f" {_sci(cost.bytes)}{est} | {_num(r['eager_ms'])} | {_num(r['compile_ms'])} |"
                     f" {', '.join(r.get('scripted') or []) or '-'} |")
    lines += ["", "scripted: what the offline `scripted` provider (no LLM key) answers with: C++ kernels on the"
              " cpu / cuda backend, Triton kernels (triton)"]
    if any(r.get("degenerate") for r in rows):
        lines.append(f"(degenerate) {DEGENERATE_LINE}")
    return "\n".join(lines)


def _sci(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def tree_outline(session: dict[str, Any], nodes: list[Any], verdicts: dict[int, Verdict]) -> str:
    """`ktree show`: the session's tree, one node a line, with statuses and speedups.
    `nodes` are store Nodes; `verdicts` maps node id to its recorded verdict."""
    sizes = ", ".join(f"{k}={v}" for k, v in session["sizes"].items())
    device = next((v.device for v in verdicts.values() if v.device), session["backend"])
    head = (f"Session {session['id']}: {session['problem']} on {where_label(session['backend'], device)}"
            f" [{sizes}],"
            f" {session.get('strategy', 'tree')}, provider {session['provider']}, {session['status']},"
            f" best {fmt_x(session.get('best_speedup'))}")
    if session.get("stop_reason"):
        head += f" ({session['stop_reason']})"
    library_ops = session_library_ops(session.get("config"))
    if excludes_library(library_ops):
        head += "\nlibrary ops excluded: a library-marked variant is correct, but neither a parent nor the best"
    if (session.get("config") or {}).get("degenerate"):
        head += f"\nproblem {DEGENERATE_LINE}"
    children: dict[int | None, list[Any]] = {}
    for n in nodes:
        children.setdefault(n.parent_id, []).append(n)
    best = best_variant(nodes, library_ops)
    lines = [head]

    def label(n: Any) -> str:
        marks = "".join(m for m, on in ((" [pinned]", n.pinned), (" [pruned]", n.pruned)) if on)
        origin = f" ({n.origin})" if n.origin != "llm" else ""
        if n.kind == "root":
            ref = session.get("ref_ms")
            said = f", eager {fmt_ms(ref)} ({EAGER_LATEST})" if ref else ""
            return f"#{n.id} reference {n.title}{said}{marks}"
        if n.kind == "idea":
            return f"#{n.id} idea r{n.round}{origin}: {n.title} — {n.status}{marks}"
        v = verdicts.get(n.id)
        speed = f" {fmt_x(n.speedup)} ({fmt_ms(n.time_ms)})" if n.speedup is not None else ""
        flags = "".join(f" [flag: {f.split(':')[0]}]" for f in (v.flags if v is not None else ()))
        if v is not None and v.library:
            flags += f" [library: {library_line(v.library)}]"
            excluded = v.status == "correct" and library_excluded(v, library_ops)
            flags += f" [{LIBRARY_EXCLUDED}]" if excluded else ""
        flags += "".join(f" [note: {note.split(':')[0]}]"
                         for note in (shown_notes(v.notes, v.library) if v is not None else ()))
        mark = language_mark(getattr(n, "language", ""))
        lang = f" {mark}" if mark else ""
        if v is not None and v.compiler_error:
            flags += f" — {v.compiler_error[:160]}"
        star = " ★ best" if best is not None and n.id == best.id else ""  # as the TUI stars it
        return f"#{n.id} variant r{n.round}{origin}{lang}: {n.status}{speed}{star}{flags}{marks}"

    def walk(n: Any, prefix: str, last: bool, top: bool) -> None:
        lines.append((prefix + ("└─ " if last else "├─ ") if not top else "") + label(n))
        kids = children.get(n.id, [])
        inner = prefix + ("   " if last else "│  ") if not top else ""
        for i, kid in enumerate(kids):
            walk(kid, inner, i == len(kids) - 1, False)

    for root in children.get(None, []):
        walk(root, "", True, True)
    return "\n".join(lines)


def suite_markdown(report: dict[str, Any]) -> str:
    """`ktree show --suite N`: one row a problem, then KernelBench's suite numbers (fast_p over
    ALL problems: correct and more than p times faster; geomean over the correct ones)."""
    suite, sc = report["suite"], report["scores"]
    head = (f"Suite {suite['id']}: {suite['name']} — {suite['status']},"
            f" {sc['problems']} problems, {sc['correct']} with a correct kernel")
    if suite.get("stop_reason"):
        head += f" ({suite['stop_reason']})"
    lines = [head, "", "| session | problem | status | best vs eager | best vs torch.compile | variants |"
             " tokens | cost |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for p in report["problems"]:
        status = p["status"] if p["correct"] or p["status"] != "finished" else "finished, none correct"
        if p["reason"] and p["status"] in ("failed", "stopped"):
            status += f": {p['reason'][:90]}"
        problem = f"{p['problem']} (degenerate)" if p.get("degenerate") else p["problem"]
        lines.append(f"| {p['session_id'] or '-'} | {problem} | {status} | {fmt_x(p['speedup_eager'])}"
                     f" | {fmt_x(p['speedup_compile'])} | {p['variants']} | {p['tokens']}"
                     f" | ${p['cost_usd']:.4f} |")
    thresholds = list(sc["fast_p_eager"])
    lines += ["", "| vs | " + " | ".join(f"fast_{t}" for t in thresholds) + " | geomean (correct only) |",
              "| --- | " + " | ".join("---" for _ in thresholds) + " | --- |"]
    # No torch.compile time at all (the cpu backend, or KTREE_COMPILE_BASELINE=0): dashes, not zeros.
    unmeasured = all(p["speedup_compile"] is None for p in report["problems"])
    for key, label in (("eager", "eager"), ("compile", "torch.compile")):
        fp = sc[f"fast_p_{key}"]
        if key == "compile" and unmeasured:
            lines.append(f"| {label} | " + " | ".join("-" for _ in thresholds) + " | - |")
            continue
        lines.append(f"| {label} | " + " | ".join(f"{fp[t]:.2f}" for t in thresholds)
                     + f" | {fmt_x(sc[f'geomean_speedup_{key}'])} |")
    lines += ["", f"correctness rate {sc['correctness_rate']:.2f} ({sc['correct']}/{sc['problems']}),"
              f" {sc['tokens']} tokens, ${sc['cost_usd']:.4f}",
              "fast_p: the fraction of all problems (failed and unloadable ones included) with a correct"
              " kernel more than p times faster than the baseline (KernelBench's definition)."]
    if unmeasured:
        lines.append("torch.compile: no baseline was measured (a search times it on the cuda backend only,"
                     " and not there when KTREE_COMPILE_BASELINE=0; `ktree bench timing` times it on the cpu"
                     " too, apart from any search).")
    if any(p.get("degenerate") for p in report["problems"]):
        lines.append(f"(degenerate) {DEGENERATE_LINE}")
    return "\n".join(lines)
