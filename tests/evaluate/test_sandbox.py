"""Crash kinds and the sandbox, on the cpu backend. Almost no test here compiles: a crash at
import or in a Python `forward` goes through the same machinery (build child, evaluation child,
sandbox, limits, watchdog) as one inside a kernel.

Each crash is followed by an honest variant in the same evaluator: it must still be evaluated to
the end (status `flagged`: torch ops), and this process — the engine — must still be running."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from engine.evaluate.host import sandbox
from engine.evaluate.host.evaluator import LocalEvaluator
from engine.evaluate.host.sandbox import Limits, Sandbox
from engine.evaluate.verdict import Verdict
from engine.problems import load_problem

SOFTMAX = load_problem("softmax")
WORK = {"flops": SOFTMAX.cost("cpu").flops, "bytes": SOFTMAX.cost("cpu").bytes}  # as the search passes them
HEADER = "import os, sys, time\nimport torch\nimport torch.nn as nn\n"
HONEST = HEADER + textwrap.dedent("""
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
""")
QUICK = {**WORK, "trials": 1, "time_budget_s": 0.2, "max_reps": 5}  # the follow-up only has to finish

STRICT, WHY_NOT = sandbox.available()
needs_strict = pytest.mark.skipif(STRICT != "strict", reason=f"strict isolation unavailable: {WHY_NOT}")


def model(forward: str) -> str:
    return textwrap.dedent(f"""
    class ModelNew(nn.Module):
        def forward(self, x):
            {forward}
    """)


def evaluate_then_honest(body: str, *, isolation: str = "auto", limits: Limits | None = None,
                         timeout_s: float | None = None) -> tuple[Verdict, Verdict, float]:
    """Evaluate `body`, then an honest variant, in one evaluator. Returns both verdicts and the
    seconds from the crash's verdict to the honest variant's (the time to recover), and prints
    `CPU-RECOVER <status> <seconds to the crash's verdict> <seconds to recover>` (see with -s)."""

    async def go() -> tuple[Verdict, Verdict, float]:
        ev = LocalEvaluator("cpu", compile_timeout_s=timeout_s, eval_timeout=timeout_s,
                       isolation=isolation, limits=limits)
        t0 = time.monotonic()
        bad = await ev.evaluate(ev.job(SOFTMAX.path, HEADER + textwrap.dedent(body),
                                       SOFTMAX.sizes_for("cpu"), **QUICK))
        t1 = time.monotonic()
        good = await ev.evaluate(ev.job(SOFTMAX.path, HONEST, SOFTMAX.sizes_for("cpu"), **QUICK))
        print(f"CPU-RECOVER {bad.status} {t1 - t0:.1f} {time.monotonic() - t1:.1f}")
        return bad, good, time.monotonic() - t1

    bad, good, recover_s = asyncio.run(go())
    assert good.status == "flagged" and good.time_ms is not None, good.log  # evaluated to the end
    assert os.getpid() > 0 and Path(f"/proc/{os.getpid()}").exists()  # the engine lives on
    return bad, good, recover_s


MARK = "ktree-sandbox-test-" + uuid.uuid4().hex[:8]
# What a variant leaves running is `sleep <this>`: a duration no one else uses, to find it by.
SLEEP = f"{600 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6:06d}"


def leftovers() -> list[str]:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if line.strip() == f"sleep {SLEEP}"]


CRASHES = {
    # name: (body, limits, timeout, status, needle in the log)
    "import-exception": ("raise ValueError('import went wrong')\n", None, None,
                         "runtime_error", "import went wrong"),
    "sys-exit-at-import": ("sys.exit(3)\n", None, None, "crashed", "exit code 3"),
    "os-exit-at-import": ("os._exit(0)\n", None, None, "crashed", "exit code 0"),
    "segfault-in-host-code": ("import ctypes\nctypes.string_at(0)\n", None, None, "crashed", "SIGSEGV"),
    "segfault-in-forward": (model("import ctypes; return ctypes.string_at(0)"), None, None,
                            "crashed", "SIGSEGV"),
    # The wall-clock timeout (the compile step imports fine; forward never returns).
    "infinite-loop": (model("while True: pass"), None, 12, "timeout", "killed after 12 s"),
    # RLIMIT_CPU ends a spinning process before the wall clock would. (The honest follow-up runs
    # under the same limit in a fresh worker: imports, checks and a clean reference time take ~5 s
    # of CPU on 2 threads, so the limit leaves it room.)
    "cpu-time-limit": (model("while True: pass"), Limits(cpu_s=12), 120, "crashed", "SIGXCPU"),
    # Touched memory grows until the tree watchdog (RSS) kills it.
    "memory-blow-up": ("hog = []\nwhile True:\n    hog.append(b'x' * (64 << 20))\n",
                       Limits(memory_bytes=1 << 30), 120, "crashed", "memory limit"),
    # One huge allocation fails at once against the address-space limit (cpu backend).
    "one-huge-allocation": ("hog = bytearray(200 << 30)\n", Limits(memory_bytes=1 << 30), 120,
                            "runtime_error", "MemoryError"),
    # Forks without end (bounded here, to spare the machine if the limit failed).
    "fork-bomb": (textwrap.dedent(f"""
        for _ in range(400):
            if os.fork() == 0:
                os.execv('/bin/sleep', ['sleep', '{SLEEP}'])
        """), Limits(procs=32), 120, "crashed", "process limit"),
    # RLIMIT_FSIZE: the write fails with EFBIG, and nothing huge lands on disk.
    "huge-file": ("with open('big.bin', 'wb') as f:\n    for _ in range(64):\n"
                  "        f.write(b'x' * (1 << 20))\n", Limits(file_bytes=8 << 20), None,
                  "runtime_error", "File too large"),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(CRASHES))
def test_crash_kinds_get_their_status_and_the_search_goes_on(kind: str):
    body, limits, timeout_s, status, needle = CRASHES[kind]
    bad, _, recover_s = evaluate_then_honest(body, limits=limits, timeout_s=timeout_s)
    assert bad.status == status, bad.log
    assert needle in bad.log
    assert recover_s < 60
    assert leftovers() == []


@pytest.mark.slow
def test_a_hung_compiler_is_killed_with_everything_it_started(tmp_path: Path):
    """The build step itself hangs: the variant points torch's extension builder at a
    'compiler' that never returns. The build's timeout kills ninja and the fake compiler too."""
    body = textwrap.dedent(f"""
        import stat
        from torch.utils.cpp_extension import load_inline
        cc = os.path.join(os.getcwd(), 'hung-cc')
        with open(cc, 'w') as f:
            f.write('#!/bin/sh\\nexec sleep {SLEEP}\\n')
        os.chmod(cc, 0o755)
        os.environ['CXX'] = cc
        ext = load_inline('hung_{MARK.replace('-', '_')}', cpp_sources='int f() {{ return 1; }}',
                          functions=['f'])
        """) + model("return torch.softmax(x, dim=1)")
    bad, _, _ = evaluate_then_honest(body, timeout_s=15)
    assert bad.status == "timeout", bad.log
    assert bad.log.startswith("while compiling: killed after 15 s")
    assert leftovers() == []


DOUBLE_FORK = f"""
if os.fork() == 0:
    os.setsid()  # out of the process group, so a killpg alone misses it
    if os.fork() == 0:
        os.execv('/bin/sleep', ['sleep', '{SLEEP}'])
    os._exit(0)
os.wait()
"""


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["basic", "strict"])
@pytest.mark.parametrize("then", ["finish", "hang"])
def test_double_forked_processes_do_not_outlive_the_evaluation(isolation: str, then: str):
    """The orphan is killed whether the program ends by itself or is killed at its timeout."""
    if isolation == "strict" and STRICT != "strict":
        pytest.skip(f"strict isolation unavailable: {WHY_NOT}")
    forward = "return torch.softmax(x, dim=1)" if then == "finish" else "while True: pass"
    bad, _, _ = evaluate_then_honest(DOUBLE_FORK + model(forward), isolation=isolation,
                                     timeout_s=None if then == "finish" else 12)
    assert bad.status == ("flagged" if then == "finish" else "timeout"), bad.log
    assert leftovers() == []


@pytest.mark.slow
def test_generated_code_sees_no_key_from_the_engines_environment(monkeypatch: pytest.MonkeyPatch):
    """The variant dumps its whole environment into its log; nothing the engine holds leaks."""
    secrets = {"OPENAI_API_KEY": "sk-secret-1", "GEMINI_API_KEY": "g-secret-2",
               "GOOGLE_API_KEY": "g-secret-3", "ANTHROPIC_API_KEY": "a-secret-4",
               "HF_TOKEN": "hf-secret-5", "AWS_SECRET_ACCESS_KEY": "aws-secret-6",
               "AWS_ACCESS_KEY_ID": "aws-id-secret-7", "GITHUB_TOKEN": "gh-secret-8",
               "KTREE_CONFIG": "/x/secret-9.toml", "TORCH_HUB_TOKEN": "th-secret-10"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # allowed through: proves the dump is there
    bad, _, _ = evaluate_then_honest("raise RuntimeError('ENV=' + repr(dict(os.environ)))\n")
    assert bad.status == "runtime_error" and "ENV={" in bad.log
    assert "'OMP_NUM_THREADS': '1'" in bad.log
    assert "secret" not in bad.log
    assert [name for name in secrets if name in bad.log] == []


# -- strict: files and network ---------------------------------------------------------------

PROBE = """
import socket
found = []
for path in {paths!r}:
    try:
        with open(path) as f:
            found.append('READ ' + path + ': ' + f.read()[:80])  # a taste: the log keeps its tail
    except OSError:
        pass
try:
    with open({write!r}, 'w') as f:
        f.write('pwned')
    found.append('WROTE ' + {write!r})
except OSError:
    pass
try:
    socket.create_connection(('127.0.0.1', {port}), timeout=2).close()
    found.append('CONNECTED to the engine host')
except OSError:
    pass
if found:
    raise RuntimeError('ESCAPED: ' + ' | '.join(found))
""" + model("return torch.softmax(x, dim=1)")


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A fake SSH key in a home dir, a config file holding a key, the engine's DB, and a
    listening TCP port on the engine's host: everything a variant must not reach."""
    home = Path.home() / f".{MARK}"  # not under /tmp: the private /tmp alone would hide it
    (home / ".ssh").mkdir(parents=True)
    key = home / ".ssh" / "id_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY----- fake")
    config = home / "config.toml"
    config.write_text('[keys]\nopenai = "sk-planted"\n')
    monkeypatch.setenv("KTREE_CONFIG", str(config))
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        yield {"paths": [str(key), str(config), str(Path.cwd() / "pyproject.toml"), "/etc/shadow"],
               "write": str(home / "dropped.txt"), "port": listener.getsockname()[1], "home": home}
    finally:
        listener.close()
        subprocess.run(["rm", "-rf", str(home)], check=False)


@pytest.mark.slow
@needs_strict
def test_strict_hides_files_and_network_that_basic_exposes(planted: dict):
    body = PROBE.format(**{k: planted[k] for k in ("paths", "write", "port")})
    # basic: the probe works (this is what strict must prevent)
    basic, _, _ = evaluate_then_honest(body, isolation="basic")
    assert basic.status == "runtime_error" and "ESCAPED" in basic.log
    assert "READ " + planted["paths"][0] in basic.log and "CONNECTED" in basic.log
    (planted["home"] / "dropped.txt").unlink()
    # strict: nothing outside the sandbox dir is read, written or reached
    strict, _, _ = evaluate_then_honest(body, isolation="strict")
    assert strict.status == "flagged", strict.log  # ran to the end: the probe found nothing
    assert not (planted["home"] / "dropped.txt").exists()


@needs_strict
def test_strict_command_line_binds_what_a_build_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import sys

    monkeypatch.setattr(sys, "path", [str(Path.home()), *sys.path])  # `python -m` from ~
    sb = Sandbox("strict", "cuda")
    work, cache = tmp_path / "work", tmp_path / "cache"
    argv = sb.command(["prog"], workdir=work, read_only=["/p/problem.py"], writable=[str(cache)])
    joined = " ".join(argv)
    assert argv[0].endswith("bwrap") and "--unshare-net" in argv and "--unshare-pid" in argv
    assert f"--bind {cache} {cache}" in joined and f"--bind {work} {work}" in joined
    assert "--ro-bind /p/problem.py /p/problem.py" not in joined  # missing files are skipped
    assert f"--ro-bind {sandbox.ENGINE_DIR} {sandbox.ENGINE_DIR}" in joined
    assert f" {Path.home()} " not in joined  # the directory ktree started from is not bound
    assert "RLIMIT_AS" not in joined  # CUDA reserves huge address space: no AS limit on cuda
    assert argv[-1] == "prog"


def test_basic_is_plain_and_strict_unavailable_is_refused(monkeypatch: pytest.MonkeyPatch):
    argv = Sandbox("basic", "cpu", Limits(cpu_s=5)).command(["prog", "arg"], workdir=Path("/w"))
    assert "bwrap" not in argv[0] and argv[-2:] == ["prog", "arg"]
    assert '"RLIMIT_CPU": [5, 10]' in " ".join(argv) and "RLIMIT_AS" in " ".join(argv)
    monkeypatch.setattr(sandbox, "available", lambda: ("basic", "bubblewrap is not installed"))
    assert sandbox.resolve("auto") == "basic"
    with pytest.raises(RuntimeError, match="bubblewrap is not installed"):
        sandbox.resolve("strict")


def test_a_killed_launcher_takes_its_program_with_it(tmp_path: Path):
    """SIGKILL to the launcher (no cleanup runs there) ends the program at once under basic too,
    as bwrap does under strict: a worker whose launcher is gone must not take the next job."""
    argv = Sandbox("basic", "cpu").command(["sleep", SLEEP], workdir=tmp_path)
    launcher = subprocess.Popen(argv, cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not leftovers():  # the program has started
            assert time.monotonic() < deadline and launcher.poll() is None
            time.sleep(0.01)
        os.kill(launcher.pid, 9)
        launcher.wait()
        deadline = time.monotonic() + 5
        while leftovers() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert leftovers() == []
    finally:  # this test's own program, by pid, if it outlived the launcher
        ps = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
        for line in ps.splitlines():
            pid, _, args = line.strip().partition(" ")
            if args.strip() == f"sleep {SLEEP}":
                with contextlib.suppress(OSError):
                    os.kill(int(pid), 9)


def test_kill_tree_signals_what_lives_below_and_waits_for_no_teardown(monkeypatch: pytest.MonkeyPatch):
    """A process that has ended but is not reaped (a zombie) is not waited for, nor is one that
    was signalled and is still tearing down (a torch process: ~40 ms, that a quit waited for);
    one it forked before the signal is found in the next pass and killed too."""
    # the shell's first child ends at once and is never reaped (exec replaces the shell); the
    # second lives until killed
    proc = subprocess.Popen(["sh", "-c", f"sleep 0 & sleep {SLEEP} & exec sleep {SLEEP}"],
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while len(sandbox._tree(proc.pid, max_age_s=0.0)) < 3:  # the shell's children have started
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.1)  # `sleep 0` has ended: a zombie below
        below = sandbox.descendants(proc.pid)
        live = [p for p, _ in sandbox._tree(proc.pid, max_age_s=0.0, live=True) if p != proc.pid]
        assert len(below) == 2 and len(live) == 1
        passes: list[float] = []
        monkeypatch.setattr(sandbox.time, "sleep", passes.append)
        sandbox.kill_tree(proc.pid)
        assert passes == [0.005]  # one pass killed the live child, the next found nothing new
        assert proc.wait(timeout=10) == -9
    finally:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, 9)
