"""What a new user hit, fourth pass (issue 36): the search screen's layout at medium sizes (4),
charts whose axes say where the values are (20), the sessions and timings tables at 80 columns
(21), and the suite's own duration and best (25)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tui.helpers import suite_of_two
from tests.tui_helpers import app_on, fake_db, two_sessions, whole_columns

# (width, height): the tree's rows and the code's lines at least this many (border and scrollbars
# not counted); 80x24 and 100x30 are compact (the tabs hidden), 110x32 the smallest wide one.
SIZES = [((80, 24), 8), ((100, 30), 10), ((110, 32), 8), ((120, 35), 10), ((132, 40), 10),
         ((140, 42), 10), ((140, 44), 10), ((160, 45), 10), ((160, 48), 12)]


@pytest.mark.parametrize(("size", "lines"), SIZES, ids=[f"{w}x{h}" for (w, h), _ in SIZES])
async def test_the_tree_and_the_code_stay_readable(tmp_path: Path, size: tuple[int, int], lines: int):
    db, sid = await fake_db(tmp_path / "k.db", 40)
    async with app_on(db, session_id=sid, size=size) as (app, pilot):
        screen = app.screen
        screen.select_node(screen.model.best_id)
        await pilot.pause()
        tree, code = screen.query_one("#tree"), screen.query_one("#code")
        assert tree.scrollable_content_region.height >= lines, tree.scrollable_content_region
        assert code.scrollable_content_region.height >= lines, code.scrollable_content_region
        wide = not screen.has_class("compact")
        assert screen.query_one("#details").display == wide  # the tabs: shown where wide
        if wide:  # the timings keep a few rows, the progress pane its text
            assert screen.query_one("#timings").scrollable_content_region.height >= 4
            assert screen.query_one("#progress").region.height >= 5
        await pilot.press("q")


async def test_the_timings_at_80x24_show_the_speedup_and_five_rows(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 40)
    async with app_on(db, session_id=sid, size=(80, 24)) as (app, pilot):
        app.screen.select_node(app.screen.model.best_id)  # (the reference's line takes three lines)
        await pilot.press("t")
        await pilot.pause()
        screen = app.screen
        table = screen.query_one("#timings")
        assert "speedup" in whole_columns(table)
        assert table.scrollable_content_region.height >= 6  # the header and 5 rows
        assert screen.query_one("#tree").region.height >= 10 and screen.query_one("#code").region.height >= 7
        assert str(table.get_cell(str(screen.model.best_id), "speedup")).endswith("x")
        await pilot.press("q")


async def test_at_120_columns_the_progress_lines_the_interval_and_the_idea_header_fit(tmp_path: Path):
    """Issue 46, item 17 at 120x35: the queue line wrapped (pushing the tokens line out), the timings
    table cut its 95 % column even zoomed, the idea header ended mid-sentence."""
    from tests.tui_helpers import running_db, shown_text

    db, sid = await running_db(tmp_path / "k.db", 40)
    async with app_on(db, session_id=sid, size=(120, 35)) as (app, pilot):
        await pilot.pause(0.3)
        screen = app.screen
        progress = shown_text(app, screen.query_one("#progress-text"))
        assert "tokens" in progress and "LLM calls" in progress, progress
        table = screen.query_one("#timings")
        assert "interval" in whole_columns(table), whole_columns(table)
        table.focus()
        await pilot.press("z")  # the timings zoomed: still whole
        await pilot.pause()
        assert screen.query_one("#tree").display is False or screen.query_one("#tree").region.width == 0
        assert "interval" in whole_columns(table)
        await pilot.press("z")
        variant = next(n for n in screen.model.nodes.values()
                       if n.kind == "variant" and screen.model.nodes[n.parent_id].kind == "idea")
        import dataclasses

        long = " ".join(["A long sentence about tiling rows across the threads of a block, one of many."] * 4)
        nodes = screen.model.nodes
        idea = nodes[variant.parent_id] = dataclasses.replace(nodes[variant.parent_id], text=long)
        screen.select_node(variant.id)
        await pilot.pause()
        header = shown_text(app, screen.query_one("#idea"))
        assert header.startswith(f"idea: {idea.title} — A long sentence"), header
        assert header.endswith("one of many. …"), header  # cut where a sentence ends
        await pilot.press("q")


async def test_at_80x24_the_sessions_footer_shows_mark_beside_compare(tmp_path: Path):
    """Issue 46, item 17: at 80x24 the footer showed `c Compare` but dropped `m Mark`."""
    db, _ = await fake_db(tmp_path / "k.db", 20)
    async with app_on(db, size=(80, 24)) as (app, pilot):
        await pilot.pause()
        keys = [k.description for k in app.screen.query("FooterKey") if k.display]
        assert "Mark" in keys and "Compare" in keys, keys
        await pilot.press("q")


@pytest.mark.parametrize("width", [80, 100, 120, 160])
async def test_the_sessions_headers_are_whole_at_any_width(tmp_path: Path, width: int):
    db, suite, _ = await suite_of_two(tmp_path / "k.db")
    async with app_on(db, size=(width, 24)) as (app, pilot):
        table = app.screen.query_one("#sessions")
        shown = [str(c.key.value) for c in table.ordered_columns]
        assert whole_columns(table) == shown  # no header cut at the right edge
        assert shown[:4] == ["id", "problem", "status", "best"]
        if width >= 160:
            assert len(shown) == 10
        await pilot.resize_terminal(160, 24)  # the columns come back as the screen widens
        await pilot.pause()
        assert len(table.ordered_columns) == 10 and whole_columns(table) == [
            str(c.key.value) for c in table.ordered_columns]
        await pilot.press("q")


async def test_the_suite_row_has_its_duration_and_best(tmp_path: Path):
    db, suite, geo = await suite_of_two(tmp_path / "k.db")
    async with app_on(db, size=(160, 24)) as (app, pilot):
        table = app.screen.query_one("#sessions")
        assert str(table.get_cell(f"suite-{suite}", "duration")) == "1h02m"
        assert str(table.get_cell(f"suite-{suite}", "best")) == f"geo {geo:.2f}x"
        await pilot.press("q")


def plot_lines(plot) -> list[str]:  # noqa: ANN001
    return plot.render().plain.splitlines()


def check_axes(lines: list[str], points: list[tuple[int, float]]) -> None:
    """Every plot row labelled, the labels evenly spaced from the lowest value to the highest, each
    point drawn on the row whose label is nearest to it; whole rounds only on x."""
    top = next(i for i, line in enumerate(lines) if "┌" in line)
    axis = next(i for i, line in enumerate(lines) if "└" in line)
    rows = lines[top + 1:axis]
    assert rows and all("┤" in line for line in rows), rows  # a label on every row
    labels = [float(line.split("┤")[0]) for line in rows]  # top to bottom
    ys = [y for _, y in points]
    assert labels[0] == pytest.approx(max(ys), abs=0.006) and labels[-1] <= min(ys) + 0.006
    step = (labels[0] - labels[-1]) / max(1, len(labels) - 1)
    for a, b in zip(labels, labels[1:], strict=False):
        assert a - b == pytest.approx(step, abs=0.011)  # evenly spaced (2 decimals)
    ticks = lines[axis + 1]
    assert all(token.isdigit() for token in ticks.split()), ticks  # rounds: integers
    columns = dict(zip((int(t) for t in ticks.split()), (i for i, c in enumerate(lines[axis]) if c == "┬"),
                       strict=True))  # each round's tick, where its points are drawn
    for x, y in points:
        col = columns[x]
        marked = [labels[i] for i, line in enumerate(rows) if line[col] not in " │"]
        assert marked, (x, y, lines)
        nearest = min(labels, key=lambda v: abs(v - y))
        assert nearest in marked, (x, y, nearest, marked, "\n".join(lines))


def test_a_gap_of_a_hundredth_is_not_drawn_as_the_whole_height():
    """Issue 46, item 18: two sessions at 1.669x and 1.679x got a y axis from 1.669 to 1.679."""
    from tui.widgets.chart import MIN_SPAN, row_values

    values = row_values(1.669, 1.679, 8)
    assert values[-1] == 1.679 and values[-1] - values[0] >= MIN_SPAN * 1.679 - 1e-9  # the top: the best
    assert row_values(0.01, 0.02, 5)[0] == 0.0  # (a speedup axis never goes below 0)
    wide = row_values(1.0, 3.0, 5)
    assert (wide[0], wide[-1]) == (1.0, 3.0)  # values far apart: the axis is theirs


@pytest.mark.parametrize("points", [[(1, 1.85), (2, 1.85)], [(1, 2.0)], [(1, 1.2), (2, 1.85), (3, 2.3)],
                                    [(1, 1.1), (2, 1.85), (3, 2.16), (4, 3.5)], [(1, 1.0), (2, 1.0), (3, 1.3)]],
                         ids=["flat", "one-round", "three", "four", "flat-then-up"])
async def test_the_progress_chart_plots_each_value_on_its_row(tmp_path: Path, points: list[tuple[int, float]]):
    db, sid = await fake_db(tmp_path / "k.db", 40)
    async with app_on(db, session_id=sid, size=(140, 44)) as (app, pilot):
        screen = app.screen
        plot = screen.query_one("#plot")
        assert plot.size.height - 3 == 4  # the 4-row axis of the issue
        screen.model.best_by_round = dict(points)
        screen.query_one("#progress").show_plot(screen.model)
        await pilot.pause()
        check_axes(plot_lines(plot), points)
        await pilot.press("q")


async def test_the_compare_chart_has_whole_rounds_and_a_legend_of_its_own(tmp_path: Path):
    db, a, b = await two_sessions(tmp_path / "k.db")
    async with app_on(db, size=(120, 35)) as (app, pilot):
        await pilot.press("m", "down", "m", "c")
        await pilot.pause()
        screen = app.screen
        lines = plot_lines(screen.query_one("#compare-plot"))
        assert not any("#" in line for line in lines)  # no legend inside: the lines cannot overwrite it
        legend = str(screen.query_one("#compare-legend").content)
        assert f"#{a}" in legend and f"#{b}" in legend
        points = [(r, v) for sid in (a, b) for r, v in screen.data[sid]["rounds"].items()]
        assert points
        check_axes(lines, points)
        await pilot.press("q")


@pytest.mark.parametrize("size", [(80, 24), (120, 35)], ids=["80x24", "120x35"])
async def test_the_compare_table_shows_both_sessions_whole_beside_the_chart(tmp_path: Path,
                                                                            size: tuple[int, int]):
    """Both sessions' columns on screen, left of the chart, each of their cells whole or cut with
    "…" (at 80 and 120 columns the second one was cut off); SCRIPTED stays on the models."""
    db, a, b = await two_sessions(tmp_path / "k.db")
    async with app_on(db, size=size) as (app, pilot):
        await pilot.press("m", "down", "m", "c")
        await pilot.pause()
        screen = app.screen
        table = screen.query_one("#compare-table")
        chart = screen.query_one("#compare-chart")
        columns = table.ordered_columns
        assert [str(c.label) for c in columns[1:]] == [f"#{s} softmax" for s in (b, a)]
        widths = [max(c.width, c.content_width) for c in columns]  # as drawn (fixed or fit to cells)
        assert sum(w + 2 * table.cell_padding for w in widths) <= table.size.width  # no column cut off
        assert table.region.right <= chart.region.x and chart.size.width >= 30
        for row in range(table.row_count):
            for col, width in enumerate(widths):
                assert len(str(table.get_cell_at((row, col)))) <= width
        models = [str(table.get_cell_at((0, col))) for col in (1, 2)]
        assert all(m.endswith("SCRIPTED") for m in models)
        assert "best after round 1" in [str(table.get_cell_at((r, 0))) for r in range(table.row_count)]
        legend = str(screen.query_one("#compare-legend").content)
        assert legend.startswith(f"• #{b}  x #{a}")
        await pilot.press("q")


async def test_a_compile_error_s_line_shows_at_120x35_and_its_pane_zooms(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch):
    """Issue 56, item 12: at 120x35 a compile_error verdict pane showed lines of dashes and a cut
    build path, not the compiler's line, and Tab could not reach the pane to zoom it. Its first lines
    now say why it failed, and Tab, then `z`, fill the screen with it. The export's line in the status
    bar is not covered by a toast."""
    import json
    import sqlite3

    from tests.tui_helpers import shown_text

    monkeypatch.chdir(tmp_path)  # (where `w` writes)
    db, sid = await fake_db(tmp_path / "k.db", 40)
    compiler = "main.cpp:10:70: error: 'kTil' was not declared in this scope"
    build = "/root/.cache/ktree/build/cpu-3f9a0c1d2e4b/softmax_rows_0123456789abcdef/build.ninja"
    with sqlite3.connect(db) as conn:
        vid, verdict = conn.execute("SELECT node_id, verdict FROM evaluations WHERE status = 'compile_error'"
                                    " ORDER BY node_id LIMIT 1").fetchone()
        log = f"{compiler}\n   10 |     for (j = 0; j < dim; j += kTil)\n" + "\n".join([build] * 6)
        conn.execute("UPDATE evaluations SET verdict = ? WHERE node_id = ?",
                     (json.dumps({**json.loads(verdict), "log": log}), vid))
    async with app_on(db, session_id=sid, size=(120, 35)) as (app, pilot):
        screen = app.screen
        screen.select_node(vid)
        await pilot.pause()
        pane = screen.query_one("#verdict")
        assert compiler in shown_text(app, pane) and "max abs err -" not in shown_text(app, pane)
        for _ in range(4):  # Tab reaches it (tree, code, then the verdict)
            if pane.has_focus:
                break
            await pilot.press("tab")
        assert pane.has_focus
        await pilot.press("z")
        await pilot.pause()
        assert screen.maximized is pane and pane.region.height >= 30
        await pilot.press("z")
        await pilot.pause()
        await pilot.press("w")  # export: said in the status line, no toast over it
        await pilot.pause()
        assert "exported #" in str(screen.query_one("#status-line").content)
        assert not [n for n in app._notifications if "wrote" in n.message]
        await pilot.press("q")


LAYERNORM_CPU_SIZES = {"batch_size": 4, "features": 8, "dim1": 32, "dim2": 32}


@pytest.mark.parametrize("size", [(80, 24), (120, 35)], ids=["80x24", "120x35"])
async def test_the_banner_the_reference_line_and_a_round_s_ties_are_read_whole(tmp_path: Path,
                                                                               size: tuple[int, int]):
    """Issue 56, item 12: text was cut at 80x24 (the banner's sizes at `dim=40…`, the status line's
    "(1 parent choice(s) a tie within noise:") and at 120x35 (layernorm's reference line at "the
    file's own are for"). Each now wraps onto the lines it needs, every word on screen."""
    import json
    import sqlite3

    from engine.record.events import RoundDone
    from tests.tui_helpers import shown_text

    db, sid = await fake_db(tmp_path / "k.db", 40, status="running")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE sessions SET problem = 'layernorm', problem_path = 'problems/level1/layernorm.py',"
                     " sizes = ? WHERE id = ?", (json.dumps(LAYERNORM_CPU_SIZES), sid))
        conn.execute("UPDATE nodes SET title = 'LayerNorm over (C, H, W), fp32' WHERE kind = 'root'")
    tie = "tie within noise: kept #3 0.07x [0.03-0.11] over #11 0.03x [0.02-0.03]"
    async with app_on(db, session_id=sid, follow=True, size=size) as (app, pilot):
        screen = app.screen
        banner = shown_text(app, screen.query_one("#banner"))
        assert banner.endswith("cpu sizes: batch_size=4 features=8 dim1=32 dim2=32"), banner
        assert banner.startswith("SCRIPTED CPU layernorm · scripted · following")
        screen.select_node(next(n.id for n in screen.model.nodes.values() if n.kind == "root"))
        await pilot.pause()
        head = shown_text(app, screen.query_one("#idea"))
        assert head == ("reference: LayerNorm over (C, H, W), fp32 — runs at the cpu sizes: batch_size=4,"
                        " features=8, dim1=32, dim2=32 (the file's own are for the GPU)"), head
        screen.receive(RoundDone(1, (3,), 0.07, (tie,)))
        await pilot.pause()
        status = shown_text(app, screen.query_one("#status-line"))
        assert status == f"session {sid} · round 1 done, best 0.07x; {tie}", status
        assert screen.query_one("#tree").region.height >= 8 and screen.query_one("#code").region.height >= 5
        progress = screen.query_one("#progress")  # its title names no plot it does not draw (cut before)
        assert progress.border_title == "progress" and not screen.query_one("#plot").display
        await pilot.press("q")


async def test_at_80x24_a_long_idea_title_is_said_to_be_cut(tmp_path: Path):
    """The line above a variant's code holds one line at 80x24: an idea's title longer than that
    ended mid-word with nothing to say so ("idea: One row at a time, three plain")."""
    import dataclasses

    from tests.tui_helpers import shown_text

    db, sid = await fake_db(tmp_path / "k.db", 20)
    async with app_on(db, session_id=sid, size=(80, 24)) as (app, pilot):
        screen = app.screen
        nodes = screen.model.nodes
        variant = next(n for n in nodes.values() if n.kind == "variant" and nodes[n.parent_id].kind == "idea")
        nodes[variant.parent_id] = dataclasses.replace(
            nodes[variant.parent_id], title="One row at a time, three plain passes over every element")
        screen.select_node(variant.id)
        await pilot.pause()
        head = shown_text(app, screen.query_one("#idea"))
        assert head.startswith("idea: One row at a time") and head.endswith("…"), head
        await pilot.press("q")
