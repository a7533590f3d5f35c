"""The timings table: a row per evaluated variant, keyed by node id, sortable."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable

from engine.domain import DEFAULT_LANGUAGE, Node
from engine.evaluate import Verdict, is_timing_flag
from tui.widgets.code import fmt_num
from tui.widgets.resize import KeepsLinesAtSize, SteadyScrollBars
from tui.widgets.status import style

# (key, label, width): fixed widths, so adding thousands of rows measures no cell. The speedup
# comes right after the status: at 80 columns it is the last column shown whole; its 95 % interval
# and the time next (at 120 columns the interval, tenth, was cut even with the pane zoomed).
COLUMNS = [("node", "node", 6), ("round", "round", 5), ("idea", "idea", 32), ("status", "status", 13),
           ("speedup", "vs eager", 8), ("interval", "95% CI", 14), ("time_ms", "ms", 8),
           ("speedup_compile", "vs compile", 10), ("p10", "p10", 8), ("p90", "p90", 8),
           ("ref_ms", "eager ms", 8), ("sol", "% SOL", 6), ("bound", "bound", 8), ("language", "lang", 6)]
COLUMN_LABELS = {key: label for key, label, _ in COLUMNS}
SORTS = [("speedup", True), ("round", False), ("time_ms", False)]  # what the sort key cycles through
DESCENDING = ("speedup", "speedup_compile", "sol")  # bigger is better: a header click sorts these down


def row_cells(node: Node, verdict: Verdict | None) -> dict[str, str | Text]:
    """A variant's row, column key -> cell."""

    def num(name: str, spec: str = ".4g", suffix: str = "") -> str:  # "-" until it is evaluated
        return fmt_num(None if verdict is None else getattr(verdict, name), spec, suffix)

    sol = None if verdict is None else verdict.sol_fraction
    return {
        "node": str(node.id), "round": str(node.round), "idea": node.title[:32],
        "status": status_cell(node),
        "time_ms": num("time_ms"), "p10": num("time_p10_ms"),
        "p90": num("time_p90_ms"), "ref_ms": num("ref_eager_ms"),
        "speedup": num("speedup_eager", ".3g", "x"),
        "interval": interval_text(verdict),
        "speedup_compile": num("speedup_compile", ".3g", "x"),
        "sol": "-" if sol is None else f"{100 * sol:.1f}",
        "bound": (verdict.bound if verdict is not None else "") or "-",
        "language": node.language or DEFAULT_LANGUAGE,
    }


def status_cell(node: Node) -> Text:
    """The status, with a `lib` mark on a correct variant that leaves the reference's main op to a
    library (docs/tui.md)."""
    cell = Text(node.status, style=style(node.status))
    if node.library and node.status == "correct":
        cell.append(" lib", style="bold yellow")
    return cell


def interval_text(verdict: Verdict | None) -> str | Text:
    """The eager speedup's ~95 % interval ("1.41-1.63"), marked when the verdict is noisy,
    contended or its reference time disturbed; "-" where there is none."""
    span = None if verdict is None else verdict.speedup_interval
    if span is None:
        return "-"
    text = f"{span[0]:.3g}-{span[1]:.3g}"
    marked = [f for f in verdict.flags if is_timing_flag(f)] if verdict else []
    return Text(text + "~", style="yellow") if marked else text


def sort_key(reverse: bool) -> Callable[[Any], float]:
    """Cells as numbers ("1.5x" -> 1.5); a "-" sorts last either way."""

    def key(value: Any) -> float:
        text = str(value).rstrip("x")
        try:
            return float(text)
        except ValueError:
            return float("-inf") if reverse else float("inf")

    return key


class TimingsTable(KeepsLinesAtSize, SteadyScrollBars, DataTable):
    """A row highlighted by the user selects its node (the screen's `_row`); one highlighted because
    rows were written, cleared or sorted does not: a verdict arriving in the focused table must not
    move the selection (DataTable highlights the first row added to an empty table, and row 0 after
    a clear), or the next steering key lands on a node the user never chose."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self._by_program = False  # the rows change by the program: its highlights are not the user's

    def on_mount(self) -> None:
        for key, label, width in COLUMNS:
            self.add_column(label, key=key, width=width)

    def post_message(self, message: Message) -> bool:
        if self._by_program and isinstance(message, DataTable.RowHighlighted):
            return False
        return super().post_message(message)

    @contextmanager
    def quietly(self) -> Iterator[None]:
        """Change the rows or the cursor without a RowHighlighted: nothing the user did."""
        was, self._by_program = self._by_program, True
        try:
            yield
        finally:
            self._by_program = was

    def write_rows(self, rows: Iterable[tuple[Node, Verdict | None]]) -> None:
        """Add or update the rows of these variants (keyed by node id: updated in place)."""
        with self.quietly():
            for node, verdict in rows:
                cells = row_cells(node, verdict)
                key = str(node.id)
                if key in self.rows:
                    for column, value in cells.items():
                        self.update_cell(key, column, value)
                else:
                    self.add_row(*(cells[k] for k, _, _ in COLUMNS), key=key)

    def clear(self, columns: bool = False) -> TimingsTable:
        with self.quietly():
            super().clear(columns)
        return self

    def sort_by(self, column: str, reverse: bool) -> None:
        with self.quietly():
            self.sort(column, key=sort_key(reverse), reverse=reverse)

    def point_at(self, node_id: int) -> None:
        """Put the cursor on this node's row, where it has one (the selection came from elsewhere:
        the tree, `b`, `#N`), so the next arrow moves from it."""
        key = str(node_id)
        if key not in self.rows:
            return
        with self.quietly():
            self.move_cursor(row=self.get_row_index(key))
