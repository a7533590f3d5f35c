"""Every KTREE_* environment variable is declared once (engine.settings) and read only
there; those that can change a time or a verdict are recorded with the session (issue 37 item 1)."""

from __future__ import annotations

import ast
import asyncio
import json
import re
from pathlib import Path

import pytest

from engine import settings
from engine.llm.scripted import ScriptedProvider
from engine.problems import load_problem
from engine.record.events import EventBus
from engine.record.store import Store
from engine.search import Search, SearchConfig
from tests.conftest import query
from tests.search.helpers import InstantEvaluator

REPO = Path(__file__).resolve().parents[2]
SOURCES = [p for root in ("engine", "tui") for p in (REPO / root).rglob("*.py")
           if "scripted_library" not in p.parts and "templates" not in p.parts]


def _environ_reads(tree: ast.AST) -> list[ast.AST]:
    """os.environ[...] loads, os.environ.get(...), os.getenv(...), `... in os.environ`."""
    def environ(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ"

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and environ(node.value) and isinstance(node.ctx, ast.Load):
            found.append(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                (node.func.attr == "get" and environ(node.func.value)) or node.func.attr == "getenv"):
            found.append(node)
        elif isinstance(node, ast.Compare) and any(environ(c) for c in node.comparators):
            found.append(node)
    return found


def test_no_file_reads_a_ktree_variable_but_through_settings():
    offenders = []
    for path in SOURCES:
        if path.relative_to(REPO).as_posix() == "engine/settings.py":
            continue
        tree = ast.parse(path.read_text())
        for node in _environ_reads(tree):
            text = ast.get_source_segment(path.read_text(), node) or ""
            names = [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]
            if "KTREE_" in text or any(n.isupper() and n.endswith("VARS") for n in names):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {text}")
    assert offenders == []


def _environ_writes(tree: ast.AST) -> list[ast.AST]:
    """os.environ[...] = ..., del os.environ[...], os.environ.update/setdefault/pop(...), os.putenv(...)."""
    def environ(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ"

    found = []
    for node in ast.walk(tree):
        written = isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del))
        if written and environ(node.value):
            found.append(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                (node.func.attr in ("update", "setdefault", "pop") and environ(node.func.value))
                or node.func.attr == "putenv"):
            found.append(node)
    return found


def test_no_file_writes_a_ktree_variable_into_its_own_environment():
    """A part is configured by the value passed to it (an argument, a job's field), never by a
    KTREE_* variable another part wrote into the process's environment (a child's own environment,
    a dict handed to the process it starts, is that child's argument)."""
    offenders = []
    for path in SOURCES:
        text = path.read_text()
        for node in _environ_writes(ast.parse(text)):
            segment = ast.get_source_segment(text, node) or ""
            if "KTREE_" in segment:
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {segment}")
    assert offenders == []
    assert _environ_writes(ast.parse('os.environ["KTREE_X"] = "1"'))  # the walk sees a write


def test_every_setting_named_in_the_code_and_the_docs_is_declared():
    used = set()
    for path in SOURCES:
        used |= set(re.findall(r"settings\.(?:get|is_set)\([\"'](KTREE_[A-Z0-9_]+)", path.read_text()))
    assert used and used <= set(settings.SETTINGS), used - set(settings.SETTINGS)
    assert settings.doc_table() in (REPO / "docs" / "commands.md").read_text()  # the page's table is the list
    with pytest.raises(KeyError, match="not a declared ktree setting"):
        settings.get("KTREE_NO_SUCH_THING")


def test_only_what_can_change_a_time_or_a_verdict_is_recorded(monkeypatch):
    for name in settings.SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KTREE_THREADS", "1")
    monkeypatch.setenv("KTREE_BUILD_LEVERS", "none")
    monkeypatch.setenv("KTREE_WORKER", "0")  # where work runs, not its result
    assert settings.recorded() == {"KTREE_THREADS": "1", "KTREE_BUILD_LEVERS": "none"}


async def test_a_search_records_the_settings_it_ran_under(tmp_path: Path, monkeypatch):
    for name in settings.SETTINGS:
        if settings.SETTINGS[name].affects in ("time", "verdict"):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KTREE_TIMING_ROTATION_MB", "64")
    db = tmp_path / "k.db"
    store = await Store.open(db)
    try:
        search = Search(store, EventBus(), [(ScriptedProvider("softmax", "cpu", seed=0), "scripted")],
                        InstantEvaluator(True), load_problem("softmax"),
                        SearchConfig.of(rounds=1, ideas=1, variants=1, fixes=0))
        await asyncio.wait_for(search.run(), timeout=60)
    finally:
        await store.close()
    [(config,)] = query(db, "SELECT config FROM sessions")
    assert json.loads(config)["environment"] == {"KTREE_TIMING_ROTATION_MB": "64"}
