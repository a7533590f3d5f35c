"""engine/evaluate/ is self-contained (torch + stdlib + itself), so it runs on a bare GPU box and on
a Ray node with nothing else of ktree there; its two evaluators keep one contract.

- statically: no module under engine/evaluate/ imports from `engine` outside `engine.evaluate`
  (every import statement, those inside functions included);
- for real: engine/evaluate/ copied alone into a temp dir, under an `engine` package that refuses
  to import anything else of the engine, imports module by module, and evaluates a variant end to
  end (its compile child and worker process run from that copy too); the package the Ray executor
  ships to a node imports the same way;
- the contract: LocalEvaluator and RayEvaluator implement the `Evaluator` protocol with the same
  signatures, and build their jobs with the one builder, whose `flops` and `bytes` come from the
  caller.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.evaluate.base import Evaluator
from engine.evaluate.host.evaluator import LocalEvaluator
from engine.evaluate.host.make_job import make_job
from engine.evaluate.jobs import EvalJob
from engine.evaluate.placement.ray_executor import NODE_PARTS, RayEvaluator, node_package
from engine.problems import load_problem

REPO = Path(__file__).resolve().parents[2]
EVALUATE = REPO / "engine" / "evaluate"
MODULES = sorted(p.stem for p in EVALUATE.glob("*.py") if p.stem != "__init__")
SOFTMAX = load_problem("softmax")

# -- static: the import statements ---------------------------------------------------------------


def outside_imports(source: str, package: str = "engine.evaluate") -> list[str]:
    """Every module an import statement in `source` (a module of `package`) names in `engine` but
    outside `package`: absolute and relative imports, at any depth (inside functions too), and
    importlib.import_module / __import__ calls with a literal name."""
    found: list[str] = []

    def check(name: str) -> None:
        if (name == "engine" or name.startswith("engine.")) and not (
                name == package or name.startswith(package + ".")):
            found.append(name)

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package, `level - 1` steps up
                parts = package.split(".")
                base = parts[: len(parts) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
                check(name if base else "engine")
                if not node.module:  # `from .. import x` names modules too
                    for alias in node.names:
                        check(f"{'.'.join(base)}.{alias.name}" if base else alias.name)
            elif node.module:
                check(node.module)
                if node.module == "engine":
                    for alias in node.names:
                        check(f"engine.{alias.name}")
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                check(node.args[0].value)
    return found


def test_the_import_check_sees_every_kind_of_import():
    """The checker below must catch what it is there to catch, wherever it hides."""
    source = textwrap.dedent("""
        import engine.evaluate.jobs
        from engine.evaluate.harness import timing
        from . import verdict
        def f():
            from engine.problems import load_problem
            import engine.search
        class C:
            def g(self):
                from .. import record
                from ..llm import base
                import importlib
                importlib.import_module("engine.cli")
        from engine.record import events
    """)
    assert set(outside_imports(source)) == {
        "engine.problems", "engine.search", "engine", "engine.record", "engine.llm", "engine.cli"}


# What evaluate/ may import of the engine: the settings (standard library only) at the bottom.
BOTTOM = ("engine", "engine.settings")


@pytest.mark.parametrize("module", ["__init__", *MODULES])
def test_no_module_of_evaluate_imports_the_rest_of_the_engine(module: str):
    found = outside_imports((EVALUATE / f"{module}.py").read_text())
    assert [name for name in found if name not in BOTTOM] == []


# -- for real: engine.evaluate alone ---------------------------------------------------------------

# The `engine` package of the hidden tree: it refuses every `engine.*` but the allowed subpackages
# (so no installed copy of ktree, an editable install's finder included, can fill the gap), and
# says which were asked for in a file next to it.
HIDDEN_ENGINE = '''
"""engine, with all but {allowed} hidden (tests/evaluate/test_self_contained.py)."""
import sys

ALLOWED = {allowed!r}


class _Hidden:
    @staticmethod
    def find_spec(name, path=None, target=None):
        top = name.split(".")
        if top[0] in ("problems", "tui") or (
                top[0] == "engine" and len(top) > 1 and top[1] not in ALLOWED):
            try:
                with open({log!r}, "a") as f:
                    f.write(name + "\\n")
            except OSError:
                pass
            raise ImportError(f"{{name}} is hidden: engine.evaluate must not need it")
        return None


sys.meta_path.insert(0, _Hidden)
'''

IMPORT_ALL = '''
import importlib, json, sys
names = json.loads(sys.argv[1])
files = {name: importlib.import_module(name).__file__ for name in names}
engine = [m for m in sys.modules if m == "engine" or m.startswith("engine.")]
print(json.dumps({"files": files, "engine_modules": engine}))
'''


def hidden_tree(root: Path, allowed: tuple[str, ...] = ("evaluate", "settings")) -> Path:
    """root/engine: the hiding __init__ and engine/evaluate/ and engine/settings.py copied alone
    (or `allowed`: subpackages and modules)."""
    package = root / "engine"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(HIDDEN_ENGINE.format(allowed=allowed, log=str(root / "hidden.log")))
    for name in allowed:
        if (REPO / "engine" / name).is_dir():
            shutil.copytree(REPO / "engine" / name, package / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / "engine" / f"{name}.py", package / f"{name}.py")
    return root


def run_in(root: Path, code: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter whose only path to ktree is `root` (not this checkout)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(root)
    return subprocess.run([sys.executable, "-c", code, *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_each_module_of_evaluate_imports_with_the_rest_of_the_engine_hidden(tmp_path: Path):
    root = hidden_tree(tmp_path)
    names = ["engine.evaluate", *(f"engine.evaluate.{m}" for m in MODULES)]
    proc = run_in(root, IMPORT_ALL, json.dumps(names))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert all(Path(f).is_relative_to(root) for f in result["files"].values()), result["files"]
    assert {m.split(".")[1] for m in result["engine_modules"] if "." in m} == {"evaluate", "settings"}
    assert not (root / "hidden.log").exists()


END_TO_END = '''
import asyncio, json, sys
from engine.evaluate.host.evaluator import LocalEvaluator

async def go():
    ev = LocalEvaluator("cpu", isolation="basic", eval_timeout=240, compile_timeout_s=240)
    try:
        job = ev.job(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), flops=None, bytes=None,
                     trials=1, time_budget_s=0.2, max_reps=5)
        return await ev.evaluate(job)
    finally:
        await ev.close()

print(json.dumps(asyncio.run(go()).to_dict()))
'''


def test_a_variant_is_evaluated_end_to_end_with_the_rest_of_the_engine_hidden(tmp_path: Path):
    """The evaluator, its compile child and its worker process all run from the hidden tree (the
    sandbox puts the tree's root on their PYTHONPATH) and reach a real verdict."""
    root = hidden_tree(tmp_path)
    source = ("import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n"
              "    def forward(self, x):\n        return torch.softmax(x, dim=1)\n")
    proc = run_in(root, END_TO_END, str(SOFTMAX.path), source, json.dumps(SOFTMAX.sizes_for("cpu")))
    assert proc.returncode == 0, proc.stderr[-3000:]
    verdict = json.loads(proc.stdout.splitlines()[-1])
    assert verdict["status"] == "flagged", verdict["log"]  # evaluated to the end (torch ops: flagged)
    assert verdict["max_abs_err"] is not None and verdict["time_ms"] is not None
    assert not (root / "hidden.log").exists()


def test_the_package_a_ray_node_gets_is_the_evaluator_and_the_executor_alone(tmp_path: Path):
    """What `connect()` ships to the cluster: engine's __init__, settings.py and evaluate/ (the
    executor with it), nothing else; and the actor's module and the evaluator import from it with the
    rest hidden."""
    shipped = node_package()
    assert sorted(p.name for p in shipped.iterdir()) == sorted(["__init__.py", *NODE_PARTS])
    root = tmp_path / "node"
    shutil.copytree(shipped.parent, root)
    allowed = tuple(p.removesuffix(".py") for p in NODE_PARTS)
    hide = HIDDEN_ENGINE.format(allowed=allowed, log=str(root / "hidden.log"))
    code = hide + IMPORT_ALL
    names = ["engine.evaluate.placement.ray_executor", "engine.evaluate.host.evaluator",
             "engine.evaluate.child.evaluation", "engine.evaluate.child.worker_process"]
    proc = run_in(root, code, json.dumps(names))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert all(Path(f).is_relative_to(root) for f in result["files"].values()), result["files"]
    assert not (root / "hidden.log").exists()


# -- one contract ----------------------------------------------------------------------------------

MEMBERS = ("job", "evaluate", "profile", "close", "device_states")


@pytest.mark.parametrize("member", MEMBERS)
def test_both_evaluators_have_the_protocols_signatures(member: str):
    expected = inspect.signature(getattr(Evaluator, member))
    assert inspect.signature(getattr(LocalEvaluator, member)) == expected
    assert inspect.signature(getattr(RayEvaluator, member)) == expected


def test_flops_and_bytes_are_keyword_only_and_required():
    params = inspect.signature(Evaluator.job).parameters
    for name in ("flops", "bytes"):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert params[name].default is inspect.Parameter.empty


async def test_the_local_evaluator_is_an_evaluator_and_its_job_carries_the_callers_work(tmp_path: Path):
    evaluator = LocalEvaluator("cpu", cache_dir=tmp_path)
    try:
        assert isinstance(evaluator, Evaluator) and evaluator.gpus is None
        with pytest.raises(TypeError):
            evaluator.job(SOFTMAX.path, "src", SOFTMAX.sizes_for("cpu"))  # type: ignore[call-arg]
        cost = SOFTMAX.cost("cpu")
        job = evaluator.job(SOFTMAX.path, "src", SOFTMAX.sizes_for("cpu"), flops=cost.flops,
                            bytes=cost.bytes, trials=5)
        assert job == make_job(SOFTMAX.path, "src", SOFTMAX.sizes_for("cpu"), backend="cpu",
                               cache_dir=str(tmp_path), flops=cost.flops, bytes=cost.bytes, trials=5)
    finally:
        await evaluator.close()
    # softmax declares its work: 5 FLOPs and 8 bytes per element at the cpu preset's 128 x 4096
    assert (job.flops, job.bytes) == (5 * 128 * 4096, 8 * 128 * 4096)


@pytest.mark.slow  # a real build: minutes on a loaded 2-core host
async def test_a_bench_builds_a_job_through_the_evaluator_s_public_way():
    """The benches build in the evaluator's compile pool with `build()` (a slot held, its build
    environment), never through its private slots and environments (the tests' shared build cache)."""
    source = (REPO / "engine" / "scripted_library" / "softmax" / "cpu" / "naive_1.py").read_text()
    evaluator = LocalEvaluator("cpu", worker=False)
    try:
        job = evaluator.job(SOFTMAX.path, source, SOFTMAX.sizes_for("cpu"), flops=None, bytes=None)
        outcome, result, log = await evaluator.build(job)
        assert outcome == "ok" and result is not None and result["status"] == "compiled", log
        assert evaluator.waiting["compile"] == 0
    finally:
        await evaluator.close()


def test_make_job_is_the_one_way_a_job_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(SOFTMAX.path.parent)
    sizes = {"batch_size": 2, "dim": 8}
    job = make_job(SOFTMAX.path.name, "src", sizes, backend="cpu", cache_dir="c", flops=10, bytes=0.0,
                   mode="compile")
    sizes["dim"] = 99  # the caller's dict is copied, not kept
    assert job == EvalJob(problem_path=str(SOFTMAX.path), solution_source="src", backend="cpu",
                          cache_dir="c", sizes={"batch_size": 2, "dim": 8}, mode="compile",
                          flops=10.0, bytes=None, language="cuda")  # zero work is unknown work, as before
    assert EvalJob.from_dict(job.to_dict()) == job
    # The job carries its language, decided here once: the caller's, else the source's (issue 47).
    triton = "import triton\nclass ModelNew: pass\n"
    assert make_job("", triton, {}, backend="cpu", cache_dir="c", flops=None, bytes=None).language == "triton"
    assert make_job("", "src", {}, backend="cpu", cache_dir="c", flops=None, bytes=None,
                    language="triton").language == "triton"
    assert make_job("", "src", {}, backend="cpu", cache_dir="c", flops=None, bytes=None).problem_path == ""
    with pytest.raises(TypeError):
        make_job("", "src", {}, backend="cpu", cache_dir="c", flops=None, bytes=None, nonsense=1)
