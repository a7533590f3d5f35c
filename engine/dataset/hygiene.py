"""What decides which rows go where: the normalised-source hash (--dedupe), "flagged", the reward,
and the split by problem. Pure functions, so the card can state each rule and a test can pin it."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable

from engine.evaluate import is_timing_flag

_C_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_SPACE = re.compile(r"\s+")
# A Python string literal (triple-quoted or not, with its prefix) or a Python comment, whichever
# starts first: a `#` inside a string (an #include) is not a comment.
_PY_TOKEN = re.compile(
    r"""(?P<string>[rRbBuUfF]{0,2}(?:\"\"\"[\s\S]*?\"\"\"|'\'\'[\s\S]*?'\'\'|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))"""
    r"|(?P<comment>\#[^\n]*)")


def _strip(match: re.Match[str]) -> str:
    return _C_COMMENT.sub("", match.group("string")) if match.group("string") is not None else ""


def normalised_source(source: str) -> str:
    """The source without comments (Python `#` ones, and C/C++ `//` and `/* */` ones inside its
    strings, where the kernels are) and without any whitespace: two sources that differ only in
    comments, blank lines or indentation normalise alike. `#include`/`#define` lines inside a
    string are code, and stay."""
    return _SPACE.sub("", _PY_TOKEN.sub(_strip, source))


def source_hash(source: str) -> str:
    """sha256 (16 hex digits) of the normalised source; "" for no source."""
    if not source.strip():
        return ""
    return hashlib.sha256(normalised_source(source).encode()).hexdigest()[:16]


def is_flagged(status: str, flags: Iterable[str]) -> bool:
    """Flagged by an integrity check (status `flagged`) or marked for review (e.g. a speedup too
    good to trust); remarks on the timing's quality (noisy, contended, reference-disturbed) do not
    count."""
    return status == "flagged" or any(not is_timing_flag(f) for f in flags)


REWARD_BY_STATUS = {"flagged": -1.0, "failed": 0.0, "compile_error": 0.0, "runtime_error": 0.1,
                    "timeout": 0.1, "crashed": 0.1, "incorrect": 0.2}
REWARD_FORMULA = (
    "correct: 1 + log2(speedup_eager) at or above parity with PyTorch eager, at most 5.0 (2.0 at 2x,"
    " 5.0 from 16x on); below parity 0.25 + 0.75 x speedup_eager (0.625 at 0.5x), so that a correct"
    " answer always scores above a wrong one and a faster one above a slower one; 1.0 when no time"
    " was taken; correct with a `library` mark (the reference's main op left to torch/cuDNN/cuBLAS,"
    " the rest in its own kernels) has its own tier, halfway between incorrect's 0.2 and what an"
    " own-kernel correct answer of its speedup gets: 0.2 + 0.5 x (that - 0.2) (0.6 at parity, 1.1 at"
    " 2x, at most 2.6), so it always scores below an own-kernel correct answer of the same speedup and"
    " above a wrong one. incorrect: 0.2; runtime_error,"
    " timeout, crashed: 0.1; compile_error and failed (no code in the reply): 0.0; flagged (an"
    " integrity check fired: a hack): -1.0"
)
LIBRARY_SCALE = 0.5  # a library-marked correct answer keeps this much of its reward above incorrect's


def reward(status: str, speedup: float | None, library: bool = False) -> float | None:
    """The reward view's scalar (REWARD_FORMULA); None for a variant never evaluated. `library`:
    the verdict's `library` mark (its own tier, below an own-kernel correct answer)."""
    if status == "correct":
        if speedup is None or not speedup > 0:
            own = 1.0
        else:
            own = min(5.0, 1.0 + math.log2(speedup)) if speedup >= 1 else 0.25 + 0.75 * speedup
        if library:
            floor = REWARD_BY_STATUS["incorrect"]
            return floor + LIBRARY_SCALE * (own - floor)
        return own
    return REWARD_BY_STATUS.get(status)


def held_out_problems(problems: Iterable[str], fraction: float, seed: int) -> frozenset[str]:
    """The problems of the test split: round(fraction x n) of them (at least one, and never all,
    when there are two or more), the first by a hash of the seed and the name: the same problems
    and seed always split alike."""
    names = sorted(set(problems))
    if len(names) < 2 or fraction <= 0:
        return frozenset()
    n = min(len(names) - 1, max(1, round(fraction * len(names))))
    ranked = sorted(names, key=lambda p: hashlib.sha256(f"{seed}:{p}".encode()).hexdigest())
    return frozenset(ranked[:n])
