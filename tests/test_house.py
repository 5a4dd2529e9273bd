"""The house has one direction: entry points on top, concept files below them, the shared core
below those, machinery/ at the bottom. These tests read every import in the project's own files
(at the top or inside a function: a lazy import is still an arrow) and fail on an arrow that goes
the wrong way; and they prove that an algorithm is one file and one line in algos.ALGOS. The root
is the reading list: entry points and concepts, few enough to read in one sitting."""

import ast
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONGEST_FUNCTION = 60  # lines a reader can see whole (STYLE.md)
MOST_ROOT_FILES = 15  # the root lists entry points and concepts; the rest lives in a package
PACKAGES = ("algos", "diagnostics", "envs", "loop", "machinery", "plain", "presets", "servers")


def project_files() -> dict[str, str]:
    """module name -> path, for the root's modules and its packages (exercises/ sits beside the
    house and is not read)."""
    found = {}
    for folder in ("", *PACKAGES):
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if name.endswith(".py"):
                module = name[:-3] if name != "__init__.py" else None
                dotted = ".".join(p for p in (folder, module) if p) or None
                if dotted:
                    found[dotted] = os.path.join(ROOT, folder, name)
    return found


def imports_of(path: str, modules: set[str]) -> set[str]:
    """The project modules (and `benchmarks...`) that the file at `path` imports, anywhere in it."""
    out = set()
    for node in ast.walk(ast.parse(open(path).read())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for n in names:
            if n in modules or n.split(".")[0] == "benchmarks":
                out.add(n)
    return out


def graph() -> dict[str, set[str]]:
    files = project_files()
    return {m: imports_of(p, set(files)) - {m} for m, p in files.items()}


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle in `edges`, as the modules around it; None: there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m):
        state[m] = 1
        path.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n) :] + [n]
            if n not in state and (found := visit(n)):
                return found
        state[m] = 2
        path.pop()
        return None

    for m in sorted(edges):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_project_has_no_import_circle():
    assert cycle(graph()) is None, " -> ".join(cycle(graph()))


def test_the_circle_finder_finds_a_planted_circle():
    edges = graph()
    edges["view"] = edges["view"] | {"train"}  # train -> view -> train, as the report once did
    assert cycle(edges) is not None


def test_nothing_outside_benchmarks_imports_benchmarks():
    wrong = {m: sorted(n for n in ns if n.startswith("benchmarks")) for m, ns in graph().items()}
    assert not {m: ns for m, ns in wrong.items() if ns}


def test_machinery_imports_no_root_module():
    """machinery/ is the bottom floor: it may import itself, never a concept file or entry point."""
    wrong = {
        m: sorted(n for n in ns if not n.startswith("machinery"))
        for m, ns in graph().items()
        if m.startswith("machinery")
    }
    assert not {m: ns for m, ns in wrong.items() if ns}


def test_sft_and_train_share_code_only_through_modules_both_import():
    edges = graph()
    assert "train" not in edges["sft"] and "sft" not in edges["train"]
    assert "train" not in edges["eval"] and "train" not in edges["view"]


def test_the_root_lists_at_most_fifteen_files():
    root = sorted(n for n in os.listdir(ROOT) if n.endswith(".py"))
    assert len(root) <= MOST_ROOT_FILES, root


def test_no_function_is_longer_than_a_reader_can_see_whole():
    """At the root, in machinery/, servers/, the other packages and exercises/ (tests/ and
    benchmarks/ aside)."""
    exercises = os.path.join(ROOT, "exercises")
    course = {
        f"exercises.{n[:-3]}": os.path.join(exercises, n) for n in os.listdir(exercises) if n.endswith(".py")
    }
    long = []
    for module, path in {**project_files(), **course}.items():
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > LONGEST_FUNCTION:
                    long.append(f"{module}.{node.name}: {n} lines")
    assert not long


TOY = '''"""A toy algorithm: GRPO's advantages scaled by a setting of its own."""

from dataclasses import dataclass

import grpo
from algorithm import Algorithm
from machinery.flags import flag


@dataclass
class Settings:
    toy_scale: float = flag(1.0, above=0)
    """toy: the factor on GRPO's advantages"""


def advantages(batch, cfg, state=None):
    grpo.advantages(batch, cfg, state)
    batch.advantages = batch.advantages * cfg.toy_scale
    print("TOY_SCALE", cfg.toy_scale)


TOY = Algorithm(advantages=advantages, loss=grpo.loss, settings=Settings, min_group_size=2)
'''


def test_an_algorithm_is_one_file_and_its_line_in_the_table(tmp_path):
    """A new algorithm file plus its import and line in algos/__init__.py: its setting becomes a flag
    that parses, checks, shows in --help and reaches the algorithm in a real training step, with no
    other file edited (run from a folder holding toy.py and the edited table as algos.py, which
    shadows the project's own)."""
    (tmp_path / "toy.py").write_text(TOY)
    table = open(os.path.join(ROOT, "algos", "__init__.py")).read()
    assert table.count("ALGOS = {\n") == 1
    table = table.replace("import gigpo\n", "import gigpo\nimport toy\n", 1)
    (tmp_path / "algos.py").write_text(table.replace("ALGOS = {\n", 'ALGOS = {\n    "toy": toy.TOY,\n', 1))
    env = {**os.environ, "PYTHONPATH": ROOT}
    script = os.path.join(ROOT, "train.py")
    launch = f"import runpy, sys; sys.argv[0] = {script!r}; runpy.run_path({script!r}, run_name='__main__')"
    run = lambda *args: subprocess.run(
        [sys.executable, "-c", launch, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    help_text = run("--help").stdout
    assert "--toy-scale" in help_text and "toy: the factor on GRPO's advantages" in help_text
    bad = run("--algo", "toy", "--toy-scale", "0")
    assert bad.returncode == 2 and "--toy-scale 0.0: must be above 0" in bad.stderr
    out = tmp_path / "run"
    flags = ["--steps", "1", "--tasks-per-step", "2", "--group-size", "2", "--eval-episodes", "0"]
    done = run("--algo", "toy", "--toy-scale", "0.5", "--rounds", "2", "--out", str(out), *flags)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "TOY_SCALE 0.5" in done.stdout
    summary = json.load(open(out / "summary.json"))
    assert summary["config"]["algo"] == "toy" and summary["config"]["toy_scale"] == 0.5
