"""What every bench shares: one way to summarize a list of numbers, one table printer."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any


def quantile(values: Iterable[float], q: float, digits: int | None = 3) -> float | None:
    """The q-quantile of the values (nearest rank), rounded to `digits` (None: as is); None for none."""
    ordered = sorted(values)
    if not ordered:
        return None
    value = ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return value if digits is None else round(value, digits)


def median(values: Iterable[float], digits: int | None = None) -> float | None:
    """The median (the mean of the middle two for an even count), rounded to `digits` (None: as
    is); None for none."""
    values = list(values)
    if not values:
        return None
    value = statistics.median(values)
    return value if digits is None else round(value, digits)


def cell(value: Any, fmt: str = "", blank: str = "-") -> str:
    """A number as a table cell: `blank` for None."""
    return blank if value is None else format(value, fmt)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table: the header, the rule, a line per row (cells as str() gives them; an
    empty one as `| |`)."""

    def line(cells: Iterable[Any]) -> str:
        return "|" + "".join(f" {c} |" if str(c) else " |" for c in cells)

    return "\n".join([line(header), line(["---"] * len(header)), *(line(row) for row in rows)])
