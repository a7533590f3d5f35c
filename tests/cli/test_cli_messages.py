"""What the command line says to a new user (issue 30): `ktree eval`'s exit codes, the
reference's own failure named as such, labels that agree between run, show, export and the
estimate (whose last sentence is whole), and the hints for a backend or tool that does not apply."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import query, run_ktree

REFERENCE_RAISES = '''import torch
class Model(torch.nn.Module):
    def forward(self, x):
        raise RuntimeError("the reference broke")
def get_inputs():
    return [torch.randn(4, 8)]
def get_init_inputs():
    return []
'''

REPO = Path(__file__).resolve().parents[2]
# A correct C++ softmax for the cpu backend: the scripted library's first (built by other tests too).
RIGHT = next(REPO.glob("engine/**/softmax/cpu/naive_1.py")).read_text()

SOLUTIONS = {
    "right.py": RIGHT,
    "torch_op.py": "import torch\nclass ModelNew(torch.nn.Module):\n"
                   "    def forward(self, x):\n        return torch.softmax(x, dim=1)\n",
    "wrong.py": "import torch\nclass ModelNew(torch.nn.Module):\n"
                "    def forward(self, x):\n        return x\n",
    "syntax.py": "import torch\nclass ModelNew(torch.nn.Module):\n"
                 "    def forward(self, x)\n        return x\n",
}


@pytest.fixture(scope="module")
def solutions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("solutions")
    for name, text in SOLUTIONS.items():
        (folder / name).write_text(text)
    (folder / "badref.py").write_text(REFERENCE_RAISES)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize(("name", "code", "needle"), [
    ("right.py", 0, "correct"),
    ("wrong.py", 1, "incorrect"),
    ("torch_op.py", 1, "flagged"),
    ("syntax.py", 1, "syntax error"),
])
def test_eval_exit_code_says_whether_every_solution_is_correct(solutions: Path, name: str, code: int,
                                                              needle: str):
    proc = run_ktree("eval", "softmax", str(solutions / name), "--backend", "cpu", "--quiet")
    assert proc.returncode == code, (proc.stdout, proc.stderr[-2000:])
    assert needle in proc.stdout.lower(), proc.stdout


@pytest.mark.slow
def test_eval_of_several_is_1_when_any_is_not_correct(solutions: Path):
    proc = run_ktree("eval", "softmax", str(solutions / "right.py"), str(solutions / "wrong.py"),
                     "--backend", "cpu", "--quiet")
    assert proc.returncode == 1, proc.stderr[-2000:]


def test_eval_names_the_reference_when_it_is_the_reference_that_raises(solutions: Path):
    proc = run_ktree("eval", str(solutions / "badref.py"), str(solutions / "wrong.py"), "--backend", "cpu",
                     "--quiet")
    assert proc.returncode == 3, (proc.stdout, proc.stderr[-2000:])
    assert "the reference itself failed" in proc.stdout and "the reference broke" in proc.stdout
    documented = " ".join(run_ktree("eval", "--help").stdout.split())
    assert "exit code 0: every solution correct" in documented
    assert "3: the reference itself failed" in documented


@pytest.mark.slow
def test_show_and_export_label_a_cpu_search_as_run_did(recorded_search: dict, tmp_path: Path):
    db = recorded_search["db"]
    assert "softmax on cpu" in recorded_search["log"]
    shown = run_ktree("--db", str(db), "show", "1")
    assert shown.returncode == 0 and "softmax on cpu (x86_64)" in shown.stdout.splitlines()[0], shown.stdout
    out = tmp_path / "best.py"
    exported = run_ktree("--db", str(db), "export", "1", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    head = out.read_text().split("\n\n")[0]
    assert "kernel language: C++ (cpu)" in head, head
    assert "torch.compile: no baseline on the cpu backend" in head and "= -" not in head, head


@pytest.mark.slow
def test_the_log_names_no_next_parents_after_the_last_round_and_show_names_flags(recorded_search: dict):
    log = recorded_search["log"]
    assert re.search(r"round 1 done: best \S+, next parents \[\d+\]", log), log[-3000:]
    assert re.search(r"round 2 done: best \S+, the last round,", log), log[-3000:]
    assert "next parents" not in log[log.index("round 2 done"):]
    shown = run_ktree("--db", str(recorded_search["db"]), "show", "1").stdout
    assert not re.search(r"flags: \d", shown), shown
    flagged = query(recorded_search["db"], "SELECT id FROM nodes WHERE status = 'flagged'")
    for (node,) in flagged:  # each flagged variant's line names its flags
        line = next(x for x in shown.splitlines() if f"#{node} variant" in x)
        assert "[flag: " in line, line


def test_counts_agree_in_number(tmp_path: Path):
    proc = run_ktree("run", "softmax", "--provider", "scripted", "--backend", "cpu", "--estimate",
                     "--rounds", "1", "--ideas", "1", "--variants", "1")
    assert proc.returncode == 0, proc.stderr
    assert "1 round x 1 idea x 1 variant" in proc.stdout, proc.stdout
    assert not re.search(r"\b1 (rounds|ideas|variants)\b", proc.stdout)


@pytest.mark.slow
def test_ncu_on_the_cpu_backend_says_it_falls_back(solutions: Path):
    proc = run_ktree("eval", "softmax", str(solutions / "right.py"), "--backend", "cpu", "--quiet",
                     "--profile", "ncu")
    assert proc.returncode == 0, proc.stderr
    assert "ktree: note: --profile ncu needs the cuda backend; on cpu the cpu profile is used" in proc.stderr


def test_a_suite_report_without_a_compile_baseline_says_so_instead_of_zeros():
    from engine.record.report import suite_markdown

    row = {"session_id": 1, "problem": "p", "status": "finished", "reason": None, "correct": True,
           "speedup_eager": 2.0, "speedup_compile": None, "variants": 1, "cost_usd": 0.0, "tokens": 0}
    scores = {"problems": 1, "correct": 1, "fast_p_eager": {1.0: 1.0}, "fast_p_compile": {1.0: 0.0},
              "geomean_speedup_eager": 2.0, "geomean_speedup_compile": None, "correctness_rate": 1.0,
              "tokens": 0, "cost_usd": 0.0}
    text = suite_markdown({"suite": {"id": 1, "name": "s", "status": "finished"}, "problems": [row],
                           "scores": scores})
    assert "| torch.compile | - | - |" in text and "| torch.compile | 0.00" not in text
    assert "torch.compile: no baseline was measured" in text
    # (issue 46, item 10: `bench timing` does time it on the cpu; the line says whose baseline is missing)
    assert "a search times it on the cuda backend only" in text and "`ktree bench timing` times it" in text
    measured = suite_markdown({"suite": {"id": 1, "name": "s", "status": "finished"},
                               "problems": [{**row, "speedup_compile": 0.5}], "scores": scores})
    assert "| torch.compile | 0.00 |" in measured and "no baseline" not in measured


def test_a_cuda_example_on_the_cpu_backend_says_it_needs_the_cuda_backend(tmp_path: Path):
    examples = REPO / "engine" / "templates" / "examples"
    proc = run_ktree("--db", str(tmp_path / "k.db"), "eval", "softmax", str(examples / "softmax_ctypes.py"),
                     "--backend", "cpu", "--json", "--quiet")
    verdict = json.loads(proc.stdout)
    assert verdict["log"].startswith("a CUDA solution needs the cuda backend"), verdict["log"][:500]
    assert "engine/templates/examples/cpu" in verdict["log"].splitlines()[0]
    assert sorted(p.name for p in (examples / "cpu").glob("*.py")) == ["layernorm_cpp.py", "softmax_cpp.py"]


def test_the_estimates_last_sentence_is_whole_in_the_cli(tmp_path: Path):
    proc = run_ktree("run", "softmax", "--provider", "scripted", "--estimate", "--db", str(tmp_path / "k.db"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "beside" not in proc.stdout
    assert "counted apart, as a range per model" in proc.stdout.strip().splitlines()[-1]


def test_a_missing_database_says_how_to_name_another(tmp_path: Path, capsys: pytest.CaptureFixture):
    """Run from another folder, a listing or a report says where it looked and names --db and
    KTREE_DB (a listing of nothing still exits 0; a session asked for does not exist: 2)."""
    from engine.cli import main

    db = str(tmp_path / "none.db")
    assert main(["sessions", "--db", db]) == 0
    said = capsys.readouterr().out
    for cmd in (["show", "1"], ["export", "1"]):
        assert main([*cmd, "--db", db]) == 2
        said += capsys.readouterr().err
    assert said.count(f"no database at {db}") == 3
    assert said.count("--db PATH or KTREE_DB=PATH") == 3


def test_a_compile_error_shows_the_compilers_first_error_line_everywhere():
    """`ktree eval`'s verdict line, `show`'s outline and the TUI's verdict pane name the compiler's
    own first error (not ninja's last words), and a reused failed build says so after it."""
    from types import SimpleNamespace

    from engine.evaluate.verdict import Verdict
    from engine.record.report import format_verdict, tree_outline
    from tui.widgets.verdict import verdict_text

    compiler = "main.cpp:37:13: error: expected ';' before 'undefined_symbol_here'"
    log = (f"{compiler}\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
           "RuntimeError: Error building extension 'ext'\nninja: build stopped: subcommand failed.")
    reused = f"{log}\n(this source failed to build before with the same compiler and flags: that result is" \
             " reused)"
    for text in (log, reused):
        v = Verdict(status="compile_error", backend="cpu", log=text)
        shown = format_verdict(v)
        assert compiler in shown and "ninja: build stopped" not in shown
        assert ("that result is reused" in shown) == (text is reused)
        node = SimpleNamespace(id=3, kind="variant", status="compile_error", round=1, pinned=False,
                               pruned=False, parent_id=None, origin="llm", title="t", speedup=None,
                               time_ms=None, library="", disturbed=False, language="cuda")
        assert compiler in verdict_text(node, v).plain
        session = {"id": 1, "problem": "softmax", "backend": "cpu", "sizes": {}, "provider": "scripted",
                   "status": "finished"}
        [line] = [ln for ln in tree_outline(session, [node], {3: v}).splitlines() if "#3 variant" in ln]
        assert "compile_error" in line and compiler in line


def test_each_eager_time_says_which_measurement_it_is():
    """Issue 56, item 5: one session showed three eager times (`show`/`problems` 0.1518 ms, `export`
    and the TUI 0.1507 ms, the dataset's median 0.1574) and no screen said which it showed. The
    reference is timed beside every variant: a verdict's own says "timed beside it", the session's
    (the reference line of `show`, `problems`) "as timed beside the latest correct variant"."""
    from types import SimpleNamespace

    from engine.domain import EAGER_BESIDE, EAGER_LATEST
    from engine.evaluate.verdict import Verdict
    from engine.record.report import format_verdict, problems_table, session_table, tree_outline
    from tui.widgets.verdict import verdict_text

    v = Verdict(status="correct", backend="cpu", time_ms=0.1, ref_eager_ms=0.1507, speedup_eager=1.507)
    assert "eager 0.1507 ms timed beside it, speedup 1.51x" in format_verdict(v)
    node = SimpleNamespace(id=3, kind="variant", status="correct", round=1, pinned=False, pruned=False,
                           parent_id=1, origin="llm", title="t", speedup=1.507, time_ms=0.1, library="",
                           disturbed=False, language="cuda")
    assert "(eager 0.1507 ms timed beside it)" in verdict_text(node, v).plain
    root = SimpleNamespace(id=1, kind="root", status="reference", round=0, pinned=False, pruned=False,
                           parent_id=None, origin="llm", title="softmax", speedup=None, time_ms=None,
                           library="", disturbed=False, language=None)
    session = {"id": 1, "problem": "softmax", "backend": "cpu", "sizes": {}, "provider": "scripted",
               "status": "finished", "ref_ms": 0.1518}
    outline = tree_outline(session, [root, node], {3: v})
    assert "#1 reference softmax, eager 0.1518 ms (as timed beside the latest correct variant)" in outline
    assert f"eager ms ({EAGER_BESIDE})" in session_table(session, [])
    assert EAGER_LATEST in problems_table([], "cpu", "a CPU").splitlines()[0]


def test_the_eval_table_says_why_each_solution_failed():
    """Issue 56, item 7: `ktree eval REF a.py b.py` showed only each status; under a solution that
    is not correct the table now gives the compiler's own line or the mismatch, as one verdict does."""
    from engine.evaluate.verdict import Verdict
    from engine.record.report import eval_table

    compiler = "main.cpp:10:70: error: 'kTil' was not declared in this scope"
    mismatch = "trial 1: max abs error 0.37 > atol 0.01 (at [3, 17])"
    rows = [("good.py", Verdict(status="correct", time_ms=1.0, speedup_eager=2.0, max_abs_err=1e-6)),
            ("broken.py", Verdict(status="compile_error", log=f"{compiler}\nninja: build stopped: failed.")),
            ("wrong.py", Verdict(status="incorrect", max_abs_err=0.37, log=mismatch))]
    lines = eval_table(rows).splitlines()
    assert lines[0].startswith("file") and lines[1].startswith("good.py")
    assert lines[2].startswith("broken.py") and lines[3] == f"    {compiler}"
    assert lines[4].startswith("wrong.py") and lines[5] == f"    {mismatch}"
    assert len(lines) == 6  # nothing under the correct one


def test_a_compile_error_names_the_solutions_own_line(tmp_path: Path):
    """Issue 56, item 7: the compiler cites load_inline's generated main.cpp (line 10 there); the
    log says which line of the solution's own file that is."""
    import subprocess

    from engine.evaluate.build_errors import in_solution, with_first_error

    solution = ('import torch\nfrom torch.utils.cpp_extension import load_inline\n'
                'cpp_src = """\n#include <torch/extension.h>\n'
                'torch::Tensor twice(torch::Tensor x) {\n    return x * 2 + undefined_thing;\n}\n"""\n')
    generated = tmp_path / "main.cpp"  # what load_inline writes: its header, then the source string
    generated.write_text("#include <torch/extension.h>\n" * 8 + "torch::Tensor twice(torch::Tensor x) {\n"
                         "    return x * 2 + undefined_thing;\n}\n")
    compiler = f"{generated}:10:20: error: 'undefined_thing' was not declared in this scope"
    exc = RuntimeError("Error building extension 'ext'")
    exc.__cause__ = subprocess.CalledProcessError(1, ["ninja"], output=f"[1/2] c++ ...\n{compiler}\n".encode())
    log = with_first_error(exc, "Traceback ...", solution)
    assert log.splitlines()[:2] == [compiler, "(the solution's line 6: return x * 2 + undefined_thing;)"]
    # Nothing is claimed where the line is not found once in the solution, or the file is gone.
    assert in_solution(compiler, solution.replace("undefined_thing", "other")) is None
    assert in_solution(f"{tmp_path}/gone.cpp:3:1: error: x", solution) is None
    assert with_first_error(exc, "Traceback ...", "").splitlines()[1] == "Traceback ..."


def test_triton_s_teardown_report_stays_off_the_terminal(tmp_path: Path):
    """Issue 56, item 9: with triton installed (`.[test]`), quitting the TUI or `show --follow`, and
    the end of a pytest run, printed ~30 lines of "nanobind: leaked 4 instances! ...
    triton._C.libtriton...": Triton's objects still alive as the interpreter ends (torch imports
    triton). Here one is kept alive on purpose; without ktree's entry point the report is printed,
    through it only ktree's own message is."""
    import subprocess
    import sys

    pytest.importorskip("triton")
    leak = ("import ctypes, sys\n"
            "import triton._C.libtriton as lt\n"
            "ctypes.pythonapi.Py_IncRef(ctypes.py_object(lt.ir.context()))  # alive at exit\n")
    through_ktree = "from engine.cli import main\nsys.exit(main(['show', '1', '--db', sys.argv[1]]))\n"
    db = str(tmp_path / "none.db")
    bare = subprocess.run([sys.executable, "-c", leak, db], capture_output=True, text=True, cwd=REPO,
                          timeout=300)
    assert "nanobind: leaked 1 instances" in bare.stderr  # the report this test keeps off the terminal
    ran = subprocess.run([sys.executable, "-c", leak + through_ktree, db], capture_output=True, text=True,
                         cwd=REPO, timeout=300)
    assert ran.returncode == 2 and ran.stderr.startswith(f"ktree: error: no database at {db}"), ran.stderr
    assert "nanobind" not in ran.stderr and len(ran.stderr.splitlines()) == 1, ran.stderr
