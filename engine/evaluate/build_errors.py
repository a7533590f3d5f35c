"""What a failed build said: the compiler's diagnostics found in a build's output, the first error
line put on top of a log (a kernel may build anywhere, and its compiler's line is said).
Standard library only (engine.evaluate.harness.fastbuild re-exports these)."""

from __future__ import annotations

import re
import subprocess

# nvcc's diagnostics: `path/cuda.cu(41): error: identifier "warp_id" is undefined`
_NVCC_ERROR = re.compile(r"^(?P<file>[^\s(]+\.cu)\((?P<line>\d+)\): error: (?P<msg>.*)$", re.M)
_GCC_ERROR = re.compile(r"^[^\s:]+\.(?:cpp|cc|cxx|h|hpp):\d+:\d+: error: ", re.M)
_UNDEFINED = re.compile(r'identifier "(\w+)" is undefined|has no member "(\w+)"')


def _chain_text(exc: BaseException) -> str:
    parts = []
    seen: BaseException | None = exc
    while seen is not None:
        parts.append(str(seen))
        output = getattr(seen, "output", None)
        if isinstance(output, bytes | str):
            parts.append(output.decode(errors="replace") if isinstance(output, bytes) else output)
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


def has_diagnostic(exc: BaseException) -> bool:
    """The failed build's output holds a compiler error message (not a killed compiler or a
    full disk, which may not happen again)."""
    text = _chain_text(exc)
    return bool(_NVCC_ERROR.search(text) or _GCC_ERROR.search(text)
                or re.search(r"\berror: |undefined reference to", text))


def is_build_error(exc: BaseException) -> bool:
    """The compiler or linker failed (anywhere in the exception's chain), not the code's import."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, subprocess.CalledProcessError):
            return True
        if isinstance(seen, RuntimeError) and "Error building extension" in str(seen):
            return True
        if isinstance(seen, ImportError) and (".so" in str(seen) or "undefined symbol" in str(seen)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


# How a compile error read back from an earlier build of the same source ends (languages.cuda).
REUSED_BUILD_ERROR = "(this source failed to build before"


def first_error(text: str) -> str | None:
    """The compiler's (or linker's) first error line in a build's output: `file.cu(41): error: ...`,
    `main.cpp:5:3: error: ...`, `undefined reference to ...`; None where there is none."""
    found = [m for m in (_NVCC_ERROR.search(text), _GCC_ERROR.search(text),
                         re.search(r"^.*(?:\berror: |undefined reference to).*$", text, re.M)) if m]
    if not found:
        return None
    first = min(found, key=lambda m: m.start())
    start = text.rfind("\n", 0, first.start()) + 1
    end = text.find("\n", first.start())
    return text[start:end if end >= 0 else len(text)].strip()[:500] or None


_WHERE = re.compile(r"^(?P<file>[^\s(:]+\.(?:cu|cuh|cpp|cc|cxx|h|hpp))(?:\((?P<nv>\d+)\)|:(?P<gcc>\d+):)")


def in_solution(line: str, source: str) -> str | None:
    """Where a compiler's line points in the solution itself: the generated file it names
    (load_inline's `main.cpp` or `cuda.cu`, which wrap the solution's source strings) read at that
    line, and that text found on exactly one line of the solution's file: "the solution's line 13".
    None where the file is gone, the line is blank or not found once."""
    where = _WHERE.match(line.strip())
    if where is None or not source:
        return None
    number = int(where.group("nv") or where.group("gcc"))
    try:
        with open(where.group("file"), errors="replace") as f:
            generated = f.read().splitlines()
    except OSError:
        return None
    if not 0 < number <= len(generated) or not generated[number - 1].strip():
        return None
    wanted = generated[number - 1].strip()
    hits = [i for i, text in enumerate(source.splitlines(), 1) if text.strip() == wanted]
    return f"the solution's line {hits[0]}: {wanted[:120]}" if len(hits) == 1 else None


def with_first_error(exc: BaseException, log: str, source: str = "") -> str:
    """A failed build's log with the compiler's first error line put on top (the traceback keeps
    only the tail of a long compiler output), and where that is in the solution's own file (the
    compiler names the generated file: `in_solution`)."""
    line = first_error(_chain_text(exc))
    if not line:
        return log
    mine = in_solution(line, source)
    top = f"{line}\n({mine})" if mine else line
    return f"{top}\n{log}" if not log.startswith(line) else log


def log_text(text: str, limit: int = 8000) -> str:
    return text if len(text) <= limit else text[:limit // 4] + "\n...\n" + text[-(limit * 3 // 4):]
