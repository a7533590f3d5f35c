"""The one-way import rule, checked on the code as it stands: cli -> commands -> tui -> launch ->
search -> (record, llm, prompts, domain) -> evaluate -> settings, the floors docs/layout.md draws.
Nothing points back up.

Every import counts, module-level or inside a function (a lazy import is still a dependency:
tests/import_graph.py reads them all)."""

from __future__ import annotations

import ast

import pytest

from tests.import_graph import GRAPH, REPO
from tests.import_graph import imports as _imports
from tests.import_graph import module_name as _module_name


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _offenders(importers: str, imported: str, allow: tuple[str, ...] = ()) -> list[str]:
    return sorted(f"{mod} imports {dep}" for mod, deps in GRAPH.items()
                  if _within(mod, importers) and mod not in allow
                  for dep in deps if _within(dep, imported))


def test_the_graph_was_read() -> None:
    assert "engine.cli" in GRAPH and "tui.app" in GRAPH and "engine.evaluate.host.evaluator" in GRAPH
    assert "engine.launch" in GRAPH["engine.cli"]  # the walk sees real edges


def test_nothing_under_the_tui_imports_the_cli() -> None:
    assert _offenders("tui", "engine.cli") == []


def test_the_engine_does_not_import_the_tui() -> None:
    """Only the entry point opens the TUI: engine.cli, and the commands through their one door to it."""
    assert _offenders("engine", "tui", allow=("engine.cli", "engine.commands._tui")) == []


def test_evaluate_imports_nothing_outside_itself() -> None:
    """It runs on a bare GPU box and on a Ray node: torch and the standard library only, and the
    settings module at the bottom of the house (standard library only)."""
    outside = sorted(f"{mod} imports {dep}" for mod, deps in GRAPH.items() if _within(mod, "engine.evaluate")
                     for dep in deps if _within(dep, "engine") and not _within(dep, "engine.evaluate")
                     and dep not in ("engine", "engine.settings") and not dep.startswith("engine.settings."))
    assert outside == []


def test_the_settings_stand_at_the_bottom_on_the_standard_library() -> None:
    """engine.settings reads every KTREE_* variable for the whole house, evaluate/ included: it
    imports nothing of ktree and nothing outside the standard library."""
    import sys

    deps = GRAPH["engine.settings"]
    assert deps and "os" in deps
    offenders = sorted(d for d in deps if d.split(".")[0] not in sys.stdlib_module_names
                       and d.split(".")[0] != "__future__")
    assert offenders == []


# engine/evaluate/ by where its code runs: the host's side (the engine's process) and the side that
# runs beside the candidate, in its process (the entry points, the harness, the languages).
HOST = "engine.evaluate.host"
BESIDE_THE_CANDIDATE = ("engine.evaluate.child", "engine.evaluate.harness", "engine.evaluate.languages")


def _reach(start: str) -> set[str]:
    """Every module of the graph that `start` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for dep in GRAPH.get(todo.pop(), ()):
            if dep in GRAPH and dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_the_evaluate_folders_were_read() -> None:
    assert {"engine.evaluate.host.evaluator", "engine.evaluate.harness.timing",
            "engine.evaluate.child.evaluation", "engine.evaluate.languages.cuda"} <= set(GRAPH)
    assert HOST in GRAPH and "engine.evaluate.harness" in GRAPH


@pytest.mark.parametrize("side", BESIDE_THE_CANDIDATE)
def test_nothing_beside_the_candidate_imports_the_host_side(side: str) -> None:
    """What runs in the candidate's process never imports what runs in the engine's (the sandbox,
    the workers' handles, the host locks): not directly, not through another module."""
    offenders = sorted(f"{mod} reaches {dep}" for mod in GRAPH if _within(mod, side)
                       for dep in _reach(mod) if _within(dep, HOST))
    assert offenders == []


def test_the_languages_do_not_import_the_child() -> None:
    """child -> languages, never back: what the languages share beside the candidate is theirs."""
    assert _offenders("engine.evaluate.languages", "engine.evaluate.child") == []


def _evaluate_folders() -> list[str]:
    """engine/evaluate/'s packages, as module names (a new folder is one of them at once)."""
    evaluate = REPO / "engine" / "evaluate"
    return sorted(f"engine.evaluate.{p.parent.name}" for p in evaluate.glob("*/__init__.py"))


def test_evaluate_s_top_imports_none_of_its_folders() -> None:
    """The top is the floor every folder stands on (the job, the verdict, the settings): a module
    there that imported a folder (the languages, to tell a job's language; the host, ...) would be
    an arrow back up, and through the package's __init__ a circle."""
    folders = _evaluate_folders()
    assert {"engine.evaluate.host", "engine.evaluate.harness", "engine.evaluate.child",
            "engine.evaluate.languages", "engine.evaluate.profile"} <= set(folders)
    top = [mod for mod in GRAPH if _within(mod, "engine.evaluate")
           and not any(_within(mod, folder) for folder in folders)]
    assert "engine.evaluate" in top and "engine.evaluate.jobs" in top
    offenders = sorted(f"{mod} imports {dep}" for mod in top for dep in GRAPH[mod]
                       if any(_within(dep, folder) for folder in folders))
    assert offenders == []


def _face() -> set[str]:
    import engine.evaluate

    return set(engine.evaluate.__all__)


def test_outsiders_import_evaluate_through_its_face_only() -> None:
    """engine.evaluate's __init__ is what the rest of ktree imports (the benches, launch, the TUI
    included): no module outside evaluate/ (tests aside) names a module inside it."""
    face = _face()
    assert {"LocalEvaluator", "make_evaluator", "EvalJob", "Verdict", "languages"} <= face
    outside = {mod: deps for mod, deps in GRAPH.items() if not _within(mod, "engine.evaluate")}
    offenders = sorted(f"{mod} imports {dep}" for mod, deps in outside.items() for dep in deps
                       if _within(dep, "engine.evaluate") and dep != "engine.evaluate"
                       and dep.removeprefix("engine.evaluate.") not in face)
    assert offenders == []


def test_the_face_s_names_resolve_and_importing_it_loads_no_folder() -> None:
    """Each name the face gives is there; the folders' are imported when first asked for, so a
    process beside the candidate that imports the top loads nothing of the host's side."""
    import subprocess
    import sys

    import engine.evaluate

    assert all(getattr(engine.evaluate, name) is not None for name in sorted(_face()))
    code = ("import sys, engine.evaluate; print(sorted(m for m in sys.modules"
            " if m.startswith('engine.evaluate.') and m.count('.') > 2))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"


def test_evaluate_s_top_holds_few_modules() -> None:
    """The records both sides share; everything else lives in the folder of where it runs."""
    top = sorted(p.name for p in (REPO / "engine" / "evaluate").glob("*.py"))
    assert len(top) <= 12, top


@pytest.mark.parametrize("lower, higher", [
    ("engine.launch", "engine.cli"),
    ("engine.launch", "engine.commands"),
    ("engine.search", "engine.commands"),
    ("engine.commands", "engine.cli"),
    ("tui", "engine.commands"),
    ("engine.search", "engine.launch"),
    ("engine.search", "engine.cli"),
    ("engine.record", "engine.search"),
    ("engine.record", "engine.launch"),
    ("engine.record", "engine.commands"),
    ("tui", "engine.launch.run"),
    ("engine.domain", "engine.record"),
    ("engine.domain", "engine.search"),
    ("engine.domain", "engine.launch"),
    ("engine.llm", "engine.search"),
    ("engine.evaluate.host", "engine.evaluate.placement"),
    ("engine.evaluate.child", "engine.evaluate.placement"),
    ("engine.evaluate.harness", "engine.evaluate.placement"),
    ("engine.evaluate.languages", "engine.evaluate.placement"),
    ("engine.evaluate.profile", "engine.evaluate.placement"),
    ("engine.evaluate.harness", "engine.evaluate.child"),
    ("engine.evaluate.harness", "engine.evaluate.languages"),
    ("engine.evaluate.harness", "engine.evaluate.profile"),
    ("engine.evaluate.profile", "engine.evaluate.host"),
    ("engine.evaluate.child", "engine.evaluate.profile"),
    ("engine.evaluate.languages", "engine.evaluate.profile"),
])
def test_no_import_points_back_up(lower: str, higher: str) -> None:
    assert _offenders(lower, higher) == []


def _is_command(name: str) -> bool:
    """A command module of engine/commands/ (helpers are named with a leading underscore). Only
    names of modules count (`from engine.commands._common import db_path` names db_path too)."""
    return name in GRAPH and name.startswith("engine.commands.") and not name.rsplit(".", 1)[1].startswith("_")


def test_the_commands_were_read() -> None:
    commands = {mod for mod in GRAPH if _is_command(mod)}
    assert {"engine.commands.run", "engine.commands.bench", "engine.commands.dataset"} <= commands
    assert "engine.commands._output" in GRAPH and not _is_command("engine.commands._output")


def test_no_command_imports_another() -> None:
    """Each subcommand stands alone: what two share lives in a helper (`_common`, `_output`, `_tui`)."""
    offenders = sorted(f"{mod} imports {dep}" for mod, deps in GRAPH.items() if _is_command(mod)
                       for dep in deps if _is_command(dep) and dep != mod)
    assert offenders == []


def test_the_engine_s_root_holds_few_modules() -> None:
    """The root holds the entry point and the floors every room stands on (at most 8 modules);
    launching (engine/launch/) and recording (engine/record/: the store, the events, and what a
    reader is handed from them, the text reports and the solution files) have folders of their own."""
    root = sorted(p.name for p in (REPO / "engine").glob("*.py"))
    assert {"cli.py", "settings.py", "domain.py"} <= set(root) and len(root) <= 8, root
    tiers = {"engine.launch.run", "engine.launch.suite", "engine.record.store", "engine.record.events",
             "engine.record.report", "engine.record.solution_file"}
    assert tiers <= set(GRAPH)


def test_the_cli_is_a_dispatch_table() -> None:
    """cli.py declares no flag: each command module registers its own parser (`register`)."""
    cli = (REPO / "engine" / "cli.py").read_text()
    assert len(cli.splitlines()) <= 80 and "add_argument" not in cli
    commands = sorted(mod for mod in GRAPH if _is_command(mod))
    tree = {mod: ast.parse((REPO / (mod.replace(".", "/") + ".py")).read_text()) for mod in commands}
    assert [mod for mod in commands if not any(isinstance(n, ast.FunctionDef) and n.name == "register"
                                               for n in tree[mod].body)] == []


@pytest.mark.parametrize("flag", ["--backend", "--gpus", "--eval-timeout", "--cpu-timer", "--rounds"])
def test_a_flag_commands_share_is_declared_once(flag: str) -> None:
    """A flag that several commands take comes from the one field that declares it (engine.options'
    parts), never from an `add_argument` of its own."""
    written = sorted(str(p.relative_to(REPO)) for p in (REPO / "engine").rglob("*.py")
                     if f'add_argument("{flag}"' in p.read_text())
    assert written == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph` (module -> names it imports; names that are not modules of the
    graph, such as `pkg.mod.func`, are not edges): each strongly connected set of two or more
    modules, or one that imports itself, sorted (Tarjan's algorithm, iterative)."""
    edges = {mod: sorted(d for d in deps if d in graph) for mod, deps in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            mod, i = work.pop()
            if i == 0:
                index[mod] = low[mod] = len(index)
                stack.append(mod)
                on_stack.add(mod)
            if i < len(edges[mod]):
                work.append((mod, i + 1))
                dep = edges[mod][i]
                if dep not in index:
                    work.append((dep, 0))
                elif dep in on_stack:
                    low[mod] = min(low[mod], index[dep])
                continue
            if low[mod] == index[mod]:
                scc = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    scc.append(top)
                    if top == mod:
                        break
                if len(scc) > 1 or mod in edges[mod]:
                    found.append(sorted(scc))
            if work:  # back in the caller: its low link takes the callee's
                caller = work[-1][0]
                low[caller] = min(low[caller], low[mod])
    return sorted(found)


def test_the_circle_finder_finds_circles() -> None:
    graph = {"a": {"b", "a.helper"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"e"}, "f": set(),
             "pkg": {"pkg.mod"}, "pkg.mod": {"pkg.other"}, "pkg.other": set()}
    assert _cycles(graph) == [["a", "b", "c"], ["e"]]  # a package importing its submodule is no circle


def test_no_import_circle() -> None:
    """Anywhere in engine/, tui/, problems/: a module never reaches itself through its imports
    (lazy imports included)."""
    assert _cycles(GRAPH) == []


# Kernels written as data, not modules of the app: their length is their content's.
DATA_FOLDERS = ("engine/templates/examples", "engine/scripted_library")
# A backstop, not the shape's rule: a module holds one concept, however long it takes to say it
# (a class is not cut into mixins to fit a count of lines); the limits below are on classes.
MAX_LINES = 1000
MAX_METHODS = 30  # a class's own methods (public, private and properties)
# Classes already over MAX_METHODS, at their count today: none may grow, and each number comes
# down with its class (made of parts it owns, as the search screen's steering keys are).
LARGER = {
    "tui/screens/search.py:SearchScreen": 50,
    "engine/search/orchestrator.py:Search": 36,
    "tui/model.py:ScreenModel": 35,
    "tui/app.py:KtreeApp": 33,
    "tui/screens/sessions.py:SessionsScreen": 32,
}
# Mixins bound by attributes still standing (see test_no_mixin_is_bound_by_attributes).
BOUND_MIXINS = {"engine/evaluate/host/reference_times.py:ReferenceTimings"}


def _app_modules() -> list[tuple[str, ast.Module]]:
    out = []
    for package in ("engine", "tui"):
        for path in sorted((REPO / package).rglob("*.py")):
            name = path.relative_to(REPO).as_posix()
            if not any(name.startswith(folder + "/") for folder in DATA_FOLDERS):
                out.append((name, ast.parse(path.read_text(), filename=str(path))))
    return out


def _classes() -> list[tuple[str, ast.ClassDef]]:
    return [(f"{name}:{node.name}", node) for name, tree in _app_modules() for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)]


def test_no_file_of_the_engine_or_the_tui_is_too_long() -> None:
    too_long = []
    for package in ("engine", "tui"):
        for path in sorted((REPO / package).rglob("*.py")):
            name = path.relative_to(REPO).as_posix()
            if any(name.startswith(folder + "/") for folder in DATA_FOLDERS):
                continue
            lines = len(path.read_text().splitlines())
            if lines > MAX_LINES:
                too_long.append(f"{name}: {lines} lines")
    assert too_long == []


def _methods(node: ast.ClassDef) -> int:
    return sum(isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) for item in node.body)


def test_no_class_has_too_many_methods() -> None:
    """A class that does many things is made of parts it owns (the store of one repository per
    aggregate, the search of its session record, the search screen of its steering keys)."""
    counts = {name: _methods(node) for name, node in _classes()}
    assert "engine/record/store.py:Store" in counts and counts["engine/record/store.py:Store"] <= 10
    over = sorted(f"{name}: {n} methods" for name, n in counts.items()
                  if n > LARGER.get(name, MAX_METHODS))
    assert over == []
    shrunk = sorted(f"{name}: {counts.get(name)} methods, listed at {n}" for name, n in LARGER.items()
                    if counts.get(name) != n)
    assert shrunk == []  # one that has come down: its number in LARGER with it (or out, at 30 or less)


def _bound_by_attributes(node: ast.ClassDef) -> bool:
    """A class that declares attributes it never sets (bare annotations) for methods that use them,
    and is no record (a dataclass, a Protocol, a TypedDict, a NamedTuple): a mixin, its fields set
    by the class it is mixed into."""
    bases = {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
    record = (bases & {"Protocol", "TypedDict", "NamedTuple"}
              or any("dataclass" in ast.unparse(d) for d in node.decorator_list))
    bare = [item for item in node.body if isinstance(item, ast.AnnAssign) and item.value is None]
    typing_only = [item for item in node.body
                   if isinstance(item, ast.If) and "TYPE_CHECKING" in ast.unparse(item.test)]
    return not record and bool(bare or typing_only) and _methods(node) > 0


def test_no_mixin_is_bound_by_attributes() -> None:
    """Composition over mixins: a part the class owns, handed what it uses (the search's session
    record reads the search through a Protocol), not a mixin bound to its host by attribute names."""
    classes = dict(_classes())
    assert not _bound_by_attributes(classes["engine/search/lifecycle.py:SessionRecord"])
    offenders = sorted(name for name, node in classes.items() if name not in BOUND_MIXINS
                       and (_bound_by_attributes(node) or node.name.endswith("Mixin")))
    assert offenders == []
    assert all(_bound_by_attributes(classes[name]) for name in BOUND_MIXINS)  # (one made whole: out)


def test_the_mixin_finder_finds_mixins() -> None:
    source = """
class Bound:
    store: object
    def write(self): return self.store

@dataclass
class Record:
    store: object
    def write(self): return self.store

class Owned:
    def __init__(self, store): self.store = store
    def write(self): return self.store
"""
    found = {node.name: _bound_by_attributes(node) for node in ast.parse(source).body}
    assert found == {"Bound": True, "Record": False, "Owned": False}


def test_the_llm_package_holds_providers_only() -> None:
    """The scripted library's kernels are data in engine/scripted_library/, not in the LLM layer."""
    llm = REPO / "engine" / "llm"
    assert not [p for p in llm.rglob("*") if p.is_dir() and p.name != "__pycache__"]
    assert "engine.llm.scripted" in GRAPH and "engine.scripted_library" in GRAPH["engine.llm.scripted"]
    assert [m for m in GRAPH if _within(m, "engine.scripted_library")] == ["engine.scripted_library"]


def test_the_scripted_library_imports_nothing_of_the_app() -> None:
    assert [d for d in GRAPH["engine.scripted_library"] if _within(d, "engine")] == []


def _screen_modules() -> set[str]:
    """The modules under tui/screens that define a screen the app navigates to (a class built on
    `Screen`); the modal dialogs and the steering keys are parts that screens own or share."""
    out = set()
    for path in sorted((REPO / "tui" / "screens").glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                    (base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")) == "Screen"
                    for base in node.bases):
                out.add(_module_name(path))
    return out


def test_no_screen_imports_another_screen() -> None:
    """Screens navigate through the app (by name: `app.open_session`, `app.open_sessions`, …),
    so no two of them import each other and no circle runs through the TUI."""
    screens = _screen_modules()
    assert {"tui.screens.search", "tui.screens.sessions", "tui.screens.compare"} <= screens
    offenders = sorted(f"{mod} imports {dep}" for mod, deps in GRAPH.items() if _within(mod, "tui.screens")
                       for dep in deps if dep in screens and dep != mod)
    assert offenders == []


def test_no_test_module_imports_another() -> None:
    """What several test modules share lives in a helper module (`tests/<area>/helpers.py`, ...) or
    a conftest fixture, never in a `test_*.py` that another imports (its tests would run twice)."""
    tests = REPO / "tests"
    modules = {_module_name(p): p for p in tests.rglob("*.py")}
    assert "tests.evaluate.helpers" in modules and "tests.test_architecture" in modules

    def is_test_module(name: str) -> bool:
        return name in modules and name.rsplit(".", 1)[-1].startswith("test_")

    offenders = sorted(f"{mod} imports {dep}" for mod, path in modules.items() for dep in _imports(path)
                       if is_test_module(dep) and dep != mod)
    assert offenders == []
