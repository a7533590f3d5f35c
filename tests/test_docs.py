"""The README and docs/ name only commands and flags that exist: every `ktree ...` in a code span
or a shell block is walked through the CLI's own parser (subcommand by subcommand, each flag
against the parser it is given to), and every other `--flag` in code must be some ktree
command's, or one of the few other tools' flags listed below."""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path

import pytest

from engine.cli import build_parser
from tests.import_graph import GRAPH

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Flags the pages name that belong to other tools, with the tool.
FOREIGN = {"--index-url": "pip", "--head": "ray start", "--address": "ray start", "--tool": "compute-sanitizer",
           "--nodes": "scripts/bench-tui", "--moves": "scripts/bench-tui", "--part": "scripts/bench-tui",
           "--sizes": "scripts/bench-tui"}
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def snippets(text: str) -> list[str]:
    """Inline code spans and the lines of fenced blocks (table pipes escaped as \\| undone)."""
    out: list[str] = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        out += [line.split("#")[0] for line in block.splitlines()]
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    out += [s.replace("\\|", "|") for s in re.findall(r"`([^`\n]+)`", prose)]
    return [s.strip() for s in out if s.strip()]


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


def every_option(parser: argparse.ArgumentParser) -> set[str]:
    found = options(parser)
    for sub in subparsers(parser).values():
        found |= every_option(sub)
    return found


def check_command(snippet: str, parser: argparse.ArgumentParser) -> list[str]:
    """What is wrong with `ktree ...` in `snippet` (empty: nothing). `a|b` names alternatives."""
    parsers, path, problems = [parser], "ktree", []
    for token in snippet.split()[1:]:
        if token.startswith("--"):
            flag = token.split("=")[0]
            problems += [f"`{snippet}`: {path} has no {flag}"
                         for p in parsers if FLAG.fullmatch(flag) and flag not in options(p)][:1]
            continue
        subs = subparsers(parsers[0])
        names = token.split("|")
        if subs and all(name in subs for name in names):
            parsers, path = [subs[name] for name in names], f"{path} {token}"
        elif subs and re.fullmatch(r"[A-Z_]+|\.\.\.", token):  # `ktree COMMAND --help`: any command
            break
        elif subs and (path == "ktree" or _required(parsers[0])):
            problems.append(f"`{snippet}`: {path} has no subcommand {token!r}")
            break
    return problems


def _required(parser: argparse.ArgumentParser) -> bool:
    return any(isinstance(a, argparse._SubParsersAction) and a.required for a in parser._actions)


def test_the_pages_exist_and_the_readme_is_short():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 120
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / link).is_file(), link
    linked = set(re.findall(r"\]\(docs/([^)#]+)", readme))
    assert {p.name for p in PAGES[1:] if p.suffix == ".md"} <= linked  # every page reachable


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_and_flag_named_exists(page: Path):
    parser = build_parser()
    known = every_option(parser)
    problems = []
    for snippet in snippets(page.read_text()):
        if re.match(r"ktree(\s|$)", snippet):
            problems += check_command(snippet, parser)
        elif not snippet.startswith(("scripts/", "pip ", "python", "ray ", "pytest")):
            problems += [f"`{snippet}`: no ktree command has {flag}" for flag in FLAG.findall(snippet)
                         if flag not in known and flag not in FOREIGN]
    assert problems == []


def test_the_checker_catches_what_does_not_exist():
    parser = build_parser()
    assert check_command("ktree run softmax --rounds 2 --headless", parser) == []
    assert check_command("ktree bench timing|pipeline --cpu-timer pin", parser) == []
    assert check_command("ktree run softmax --no-such-flag", parser) == [
        "`ktree run softmax --no-such-flag`: ktree run has no --no-such-flag"]
    assert check_command("ktree frobnicate", parser) == [
        "`ktree frobnicate`: ktree has no subcommand 'frobnicate'"]
    assert check_command("ktree bench nothing", parser) == [
        "`ktree bench nothing`: ktree bench has no subcommand 'nothing'"]
    assert check_command("ktree eval --profile auto", parser) == []
    assert check_command("ktree eval --follow", parser) == ["`ktree eval --follow`: ktree eval has no --follow"]


FULL_TESTS = ("python -m pytest -q -m '(slow or not slow) and not alone' -n 2 --dist loadfile --durations=25"
              " && python -m pytest -q -m alone -n 0 --durations=10")


def test_the_readme_test_command_is_the_one_ci_runs():
    """Both tiers, in the README and in CI alike, then the tests that need the host to themselves;
    plain `pytest` is the quick tier (issue 45)."""
    readme, ci = (REPO / "README.md").read_text(), (REPO / ".ci" / "run").read_text()
    assert f"pip install -e '.[test]' && {FULL_TESTS}\n" in readme
    assert "pip install -e '.[test]'\n" in ci and ci.rstrip().endswith(FULL_TESTS)
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert pyproject["addopts"] == "-m 'not slow' -n 2 --dist loadfile"
    assert any(m.startswith("slow:") for m in pyproject["markers"])
    assert any(m.startswith("alone:") for m in pyproject["markers"])


def test_each_readme_test_command_installs_the_test_extras_first():
    """Issue 56, item 2: after the README's set-up (`pip install -e .`) a bare `python -m pytest`
    said "No module named pytest": every command of the README that runs the tests works as written,
    so each installs `.[test]` before it."""
    commands = [s for s in snippets((REPO / "README.md").read_text()) if "pytest" in s]
    assert len(commands) >= 2  # the quick tier and both tiers
    for command in commands:
        assert command.startswith("pip install -e '.[test]' && python -m pytest"), command


def test_the_layout_page_names_every_module():
    """docs/layout.md covers every module of engine/ and tui/ (the scripted library's kernels and
    the templates are data): a module added without a line there fails here."""
    text = (REPO / "docs" / "layout.md").read_text()
    def data(p: Path) -> bool:
        return ("scripted_library" in p.parts and p.parent.name != "scripted_library") or "templates" in p.parts

    modules = [p.relative_to(REPO).as_posix() for root in ("engine", "tui")
               for p in sorted((REPO / root).rglob("*.py")) if not data(p)]
    assert len(modules) > 100
    assert [m for m in modules if f"`{m}`" not in text] == []


# A room of a picture of the floors: a module or a folder of the app, named from the repository's root.
ROOM = re.compile(r"(?<![\w/])((?:engine|tui|problems)/(?:\w+/)*(?:\w+\.py)?)")


def floor_pictures(text: str) -> list[dict[str, int]]:
    """The pictures of the floors in `text`: each fenced block that opens with `floor`, as room ->
    floor (a line with no number of its own goes on with the floor above it)."""
    pictures = []
    for block in re.findall(r"```\n(floor .*?)```", text, flags=re.S):
        rooms: dict[str, int] = {}
        floor = None
        for line in block.splitlines()[1:]:
            if number := re.match(r"\s*(\d+)\s", line):
                floor = int(number.group(1))
            for room in ROOM.findall(line):
                assert room not in rooms and floor is not None, line
                rooms[room] = floor
        pictures.append(rooms)
    return pictures


def _room(module: str, rooms: dict[str, int]) -> str | None:
    """The room of a picture that holds `module` (the innermost that does), or None."""
    path = module.replace(".", "/")
    path += "/" if (REPO / path / "__init__.py").is_file() else ".py"
    holding = [r for r in rooms if path == r or (r.endswith("/") and path.startswith(r))]
    return max(holding, key=len, default=None)


def test_the_floor_reader_reads_floors():
    picture = ("```\nfloor  rooms\n  2   engine/cli.py   tui/    the top\n"
               "   0   engine/evaluate/  x\n       problems/\n```\n")
    assert floor_pictures(picture) == [{"engine/cli.py": 2, "tui/": 2, "engine/evaluate/": 0, "problems/": 0}]
    rooms = {"engine/evaluate/": 1, "engine/evaluate/host/": 2, "engine/settings.py": 0}
    assert _room("engine.evaluate.host.evaluator", rooms) == "engine/evaluate/host/"
    assert _room("engine.evaluate.jobs", rooms) == _room("engine.evaluate", rooms) == "engine/evaluate/"
    assert _room("engine.settings", rooms) == "engine/settings.py" and _room("engine.cli", rooms) is None


def test_the_layout_page_s_floors_are_the_import_graph_s():
    """docs/layout.md draws the house's floors and evaluate/'s: every room is in its picture, imports
    only rooms on floors below it, and stands on the lowest floor its imports allow (the import graph's
    own floors: an import that lifts a room, or a room added, fails here until the picture is redrawn)."""
    house, evaluate = floor_pictures((REPO / "docs" / "layout.md").read_text())
    engine = REPO / "engine"
    assert set(house) == ({f"engine/{p.name}" for p in engine.glob("*.py") if p.name != "__init__.py"}
                          | {f"engine/{p.parent.name}/" for p in engine.glob("*/__init__.py")}
                          | {"tui/", "problems/"})
    assert set(evaluate) == {"engine/evaluate/"} | {f"engine/evaluate/{p.parent.name}/"
                                                   for p in (engine / "evaluate").glob("*/__init__.py")}
    wrong = []
    for rooms in (house, evaluate):
        imported: dict[str, set[str]] = {room: set() for room in rooms}
        for module, deps in GRAPH.items():
            if (here := _room(module, rooms)) is not None:
                imported[here] |= {there for dep in deps if dep in GRAPH
                                   and (there := _room(dep, rooms)) not in (None, here)}
        for room, floor in rooms.items():
            wrong += [f"{room} (floor {floor}) imports {dep} (floor {rooms[dep]})"
                      for dep in sorted(imported[room]) if rooms[dep] >= floor]
            lowest = 1 + max((rooms[dep] for dep in imported[room]), default=-1)
            if lowest != floor:
                wrong.append(f"{room}: drawn on floor {floor}, its imports put it on {lowest}")
    assert wrong == []


def test_the_layout_page_names_what_exists_and_every_folder():
    """Every file or folder docs/layout.md names in code exists (named from the root, or by its end:
    `host/make_job.py`), and every package folder of engine/ and tui/ is named whole."""
    text = (REPO / "docs" / "layout.md").read_text()
    named = set(re.findall(r"`([\w./-]+(?:\.py|/))`", text)) | {r for p in floor_pictures(text) for r in p}
    files = [p.relative_to(REPO).as_posix() for root in ("engine", "tui", "tests", "problems", "scripts")
             for p in (REPO / root).rglob("*") if "__pycache__" not in p.parts]
    assert len(named) > 100
    missing = sorted(n for n in named if not (REPO / n.rstrip("/")).exists()
                     and not any(f.endswith("/" + n.rstrip("/")) for f in files))
    assert missing == []
    folders = sorted(f"{p.parent.relative_to(REPO).as_posix()}/" for root in ("engine", "tui")
                     for p in (REPO / root).rglob("__init__.py"))
    assert len(folders) > 15
    assert [f for f in folders if f"`{f}`" not in text and f not in named] == []


def _first_paragraph(path: Path) -> str:
    import ast

    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split())


def test_the_layout_page_s_rows_say_what_the_modules_docstrings_say():
    """Each row of docs/layout.md's module tables is its module's docstring, from its start to the
    end of a clause (a row rewritten by hand drifts from the module it describes)."""
    text = (REPO / "docs" / "layout.md").read_text()
    rows = re.findall(r"^\| `([^`]+\.py)` \| (.*) \|$", text, re.M)
    assert len(rows) > 100
    drifted = []
    for module, row in rows:
        row = row.replace("\\|", "|")
        doc = _first_paragraph(REPO / module)
        rest = doc[len(row):] if doc.startswith(row) else None
        if rest is None or not (rest == "" or rest[0] in ":.;," or rest.startswith((" (", " —"))):
            drifted.append(f"{module}: {row!r} is not the start of {doc[:120]!r}")
    assert drifted == []


def test_the_readme_s_venv_in_the_checkout_stays_out_of_git_tests_and_lint():
    """Issue 46, item 18: the README makes `.venv` inside the checkout; git ignores it, pytest looks in
    tests/ only (and skips dot-folders), ruff skips it."""
    import shutil
    import subprocess

    assert "python3 -m venv .venv" in (REPO / "README.md").read_text()
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert config["tool"]["pytest"]["ini_options"]["testpaths"] == ["tests"]
    assert ".venv" not in str(config["tool"].get("ruff", {}).get("include", ""))  # (skipped by default)
    if shutil.which("git") and (REPO / ".git").exists():
        ignored = subprocess.run(["git", "check-ignore", "-q", ".venv/lib/site.py"], cwd=REPO)
        assert ignored.returncode == 0


def test_the_tui_page_names_every_key_of_the_search_screen():
    """Issue 56, item 16: docs/tui.md's key table, "every key", left out `f` (profile). Every binding
    of the search screen (and the app's) is in its tables, by its id."""
    from tui.app import KtreeApp
    from tui.screens.search import SearchScreen

    text = (REPO / "docs" / "tui.md").read_text()
    ids = {b.id for b in [*SearchScreen.BINDINGS, *KtreeApp.BINDINGS] if b.id}
    assert {"profile", "pin", "quit"} <= ids
    missing = sorted(i for i in ids if not re.search(rf"^\|[^|]*\| [^|]*`{re.escape(i)}`", text, re.M))
    assert missing == []
