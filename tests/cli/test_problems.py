from pathlib import Path

import pytest

from engine.problems import ProblemError, builtin_problems, load_problem


def test_builtin_problems_load_with_their_sizes():
    assert {"softmax", "layernorm"} <= set(builtin_problems())
    softmax = load_problem("softmax")
    assert softmax.sizes == {"batch_size": 4096, "dim": 65536}
    assert softmax.sizes_for("cuda") == {"batch_size": 4096, "dim": 65536}
    assert softmax.sizes_for("cpu") == {"batch_size": 128, "dim": 4096}
    layernorm = load_problem("level1/layernorm")
    assert layernorm.sizes == {"batch_size": 16, "features": 64, "dim1": 256, "dim2": 256}
    assert layernorm.name == "layernorm"


def test_problem_from_any_path(tmp_path: Path):
    path = tmp_path / "relu.py"
    path.write_text(
        "import torch\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.relu(x)\n"
        "n = 64\n"
        "def get_inputs():\n"
        "    return [torch.randn(n)]\n"
        "def get_init_inputs():\n"
        "    return []\n"
    )
    problem = load_problem(str(path))
    assert problem.name == "relu"
    assert problem.sizes == {"n": 64}
    assert problem.sizes_for("cpu") == {"n": 64}  # no preset declared: full sizes


def test_a_file_that_is_not_a_problem_is_said_so_before_any_of_it_runs(tmp_path: Path):
    marker = tmp_path / "ran"
    path = tmp_path / "notkb.py"
    path.write_text(f"open({str(marker)!r}, 'w').write('ran')\nprint('hello')\n")
    with pytest.raises(ProblemError, match="missing `Model`, `get_inputs`, `get_init_inputs`"):
        load_problem(str(path))
    assert not marker.exists()  # read, never executed
    # bound under an if, or by an import, still counts as there
    path.write_text("import torch\nif True:\n    class Model: pass\n"
                    "from math import sqrt as get_inputs\nget_init_inputs = list\n")
    with pytest.raises(ProblemError) as info:
        load_problem(str(path))
    assert "missing" not in str(info.value)


DEFS = "class Model: pass\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("def get_inputs(): return []\ndef get_init_inputs(): return []\n", "missing `Model`"),
        ("class Model: pass\ndef get_inputs(): return []\n", "missing `get_init_inputs`"),
        ("class Model(:\n", "syntax error on line 1"),
        ("import no_such_module_here\n" + DEFS, "fails to import: ModuleNotFoundError"),
        ("raise SystemExit(3)\n" + DEFS, "fails to import: SystemExit"),
        ("import torch\nclass Model: pass\ndef get_init_inputs(): return []\n"
         "def get_inputs(): raise ValueError('no data file')\n",
         "get_inputs() raises ValueError: no data file"),
        ("import torch\nclass Model: pass\ndef get_inputs(): return []\n"
         "def get_init_inputs(): return [undefined_name]\n",
         "get_init_inputs() raises NameError"),
    ],
)
def test_bad_problem_files_give_one_line_errors(tmp_path: Path, body: str, expected: str):
    path = tmp_path / "bad.py"
    path.write_text(body)
    with pytest.raises(ProblemError) as info:
        load_problem(str(path))
    message = str(info.value)
    assert expected in message
    assert str(path) in message
    assert "\n" not in message


def test_unknown_problem_names_the_builtins():
    with pytest.raises(ProblemError, match="unknown problem 'nope'.*softmax"):
        load_problem("nope")
    with pytest.raises(ProblemError, match="no such problem file"):
        load_problem("/no/such/file.py")


def test_inputs_that_meta_tensors_cannot_make_are_checked_for_real(tmp_path: Path):
    path = tmp_path / "itemized.py"
    path.write_text(
        "import torch\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x * 2\n"
        "n = 16\n"
        "def get_inputs():\n"
        "    k = int(torch.tensor(n).item())  # .item() has no meaning on meta tensors\n"
        "    return [torch.randn(k)]\n"
        "def get_init_inputs():\n"
        "    return []\n"
    )
    assert load_problem(str(path)).sizes == {"n": 16}


def test_a_files_checks_are_kept_for_its_contents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Issue 56, item 15: `ktree problems` checked every problem's inputs and ran its reference twice
    on each start (16 s on a loaded machine); what those checks found is kept for the file's contents."""
    import engine.problems as problems

    monkeypatch.setenv("KTREE_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "scale.py"
    source = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
              "n = 64\ndef get_inputs():\n    return [torch.randn(n)]\ndef get_init_inputs():\n    return []\n")
    path.write_text(source)
    assert problems.load_problem(str(path)).degenerate is False
    problems._VARIES.clear()

    def never(*args: object) -> None:
        raise AssertionError("checked again")

    monkeypatch.setattr(problems, "_check_inputs", never)
    monkeypatch.setattr(problems, "_varies", never)
    assert problems.load_problem(str(path)).degenerate is False  # from what was kept
    path.write_text(source.replace("x * 2", "x * 3"))  # new contents: checked again
    with pytest.raises(AssertionError, match="checked again"):
        problems.load_problem(str(path))
