"""Docs agree with the code: every function the course or a module docstring names exists.

Where it sits: reads docs/course.md and the docstring of every project module, and resolves each
name by reading the files (their syntax trees), never by importing them: a module is found by its
file name wherever it sits in the tree, so moving a file keeps its references valid and renaming or
deleting a function breaks them. Three forms are checked:
- `module.name` (and `module.Class.method`) in backticks, where `module` is a project file's name;
- `file.py:name` and "file.py, `name`";
- in a course lesson's "Read" paragraph, each bare `name` after a link to a .py file, in that file
  (there a variable the file uses counts: "where `horizon` is passed to the rollout").
"""

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SKIP = {"vendor", "tests", "runs", ".git"}
COURSE = ROOT / "docs" / "course.md"
SUFFIXES = {"py", "md", "json", "jsonl", "png", "html", "js", "css", "csv", "txt", "gguf", "pt", "sh"}


def project_files() -> list[Path]:
    return [p for p in ROOT.rglob("*.py") if not SKIP & set(p.relative_to(ROOT).parts)]


@cache
def modules() -> dict[str, list[Path]]:
    """Module name (the file's stem) -> the files of that name."""
    found: dict[str, list[Path]] = {}
    for path in project_files():
        found.setdefault(path.stem, []).append(path)
    return found


@cache
def names_in(path: Path) -> dict[str, set[str]]:
    """Every name a file defines, keyed by where: '' for the module's top level, a class's name for
    its methods, fields and `self.x` attributes. Every other identifier the file uses (a local
    variable, an argument, an attribute) is under '~'."""
    tree = ast.parse(path.read_text())
    out: dict[str, set[str]] = {"": set(), "~": set()}
    for node in tree.body:
        out[""] |= defined(node)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            out.setdefault(node.name, set()).update(n for child in node.body for n in defined(child))
            out[node.name] |= {
                t.attr
                for t in ast.walk(node)
                if isinstance(t, ast.Attribute) and isinstance(t.ctx, ast.Store)
            }
        elif isinstance(node, ast.Name):
            out["~"].add(node.id)
        elif isinstance(node, (ast.arg, ast.Attribute)):
            out["~"].add(node.arg if isinstance(node, ast.arg) else node.attr)
    return out


def defined(node) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    return set()


def resolves(path: Path, dotted: str) -> bool:
    """`name`, `Class.name` or `name.attribute` defined in the file (an attribute of an instance,
    such as batch.ref_logprobs, is a field or attribute of any class in the file)."""
    names, parts = names_in(path), dotted.split(".")
    if parts[0] not in names[""]:
        return any(parts[0] in defs for key, defs in names.items() if key not in ("", "~"))
    return len(parts) == 1 or parts[0] not in names or parts[1] in names[parts[0]]


def resolves_anywhere(module: str, dotted: str) -> bool:
    return any(resolves(path, dotted) for path in modules()[module])


def docstrings() -> list[tuple[str, str]]:
    out = []
    for path in project_files():
        doc = ast.get_docstring(ast.parse(path.read_text()))
        if doc:
            out.append((str(path.relative_to(ROOT)), doc))
    return out


DOTTED = re.compile(r"`([a-z_][a-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_.]*?)(?:\(\))?`")
FILE_NAME = re.compile(r"([a-z_][a-z0-9_]*)\.py(?::`?|, `)([A-Za-z_][A-Za-z0-9_.]*)")
NOT_OURS = {("config", "quantization_config")}  # a Hugging Face model's config, not config.py
# `openenv.core.…` is the `openenv` package's, not servers/openenv.py's or envs/openenv.py's
OUTSIDE = {"openenv": {"core"}}


def references(text: str) -> list[tuple[str, str]]:
    """(module, dotted name) pairs a text names, for modules that are project files."""
    found = DOTTED.findall(text) + FILE_NAME.findall(text)
    found = [(m, name.rstrip(".")) for m, name in found]  # a sentence's full stop is not the name's
    found = [(m, name) for m, name in found if (m, name) not in NOT_OURS and name not in SUFFIXES]
    found = [(m, name) for m, name in found if name.split(".")[0] not in OUTSIDE.get(m, ())]
    return [(m, name) for m, name in found if m in modules() and name]


def course_read_lists() -> list[tuple[str, str]]:
    """(file, bare name) pairs of the lessons' "Read" paragraphs: the names after each .py link."""
    out = []
    for paragraph in COURSE.read_text().split("\n\n"):
        if not re.match(r"(Read|Then read|After\b[^:]*read)", paragraph):
            continue
        parts = re.split(r"\[[^\]]*\]\(\.\./([^)]+)\)", paragraph)  # text, link, text, link, ...
        for link, text in zip(parts[1::2], parts[2::2]):
            text = re.split(r"\[|;", text)[0]  # up to the next link or ';'
            text = re.sub(r"\([^)]*\)", "", text)  # a parenthesis lists what a function shows
            if link.endswith(".py"):
                out += [(link, n) for n in re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)`", text)]
    return out


def test_the_checker_finds_the_references_it_is_meant_to():
    assert references("see `grpo.group_advantages` and agent.py:_rollout_chunk") == [
        ("grpo", "group_advantages"),
        ("agent", "_rollout_chunk"),
    ]
    assert references("`openenv.core.GenericEnvClient` drives `openenv.add_openenv`") == [
        ("openenv", "add_openenv")
    ]
    assert resolves_anywhere("scaling_inter", "Schedule.stage")
    assert not resolves_anywhere("scaling_inter", "Schedule.no_such_method")
    assert not resolves_anywhere("grpo", "no_such_function")
    assert course_read_lists(), "no Read paragraph found in docs/course.md"


@pytest.mark.parametrize("where", ["docs/course.md", "module docstrings"])
def test_every_module_function_named_in_the_docs_exists(where):
    texts = [(where, COURSE.read_text())] if where == "docs/course.md" else docstrings()
    missing = [
        f"{source}: {m}.{name}"
        for source, text in texts
        for m, name in references(text)
        if not resolves_anywhere(m, name)
    ]
    assert not missing, "named but not defined:\n" + "\n".join(missing)


def test_every_name_on_a_lessons_reading_list_is_in_the_file_linked_before_it():
    missing = []
    for link, name in course_read_lists():
        path = (COURSE.parent / ".." / link).resolve()
        module = Path(link).stem
        here = [path] if path.exists() else modules().get(module, [])  # a moved file: by its name
        if any(resolves(p, name) or name in names_in(p)["~"] for p in here):
            continue
        missing.append(f"{link}: {name}")
    assert not missing, "docs/course.md reads a name its file does not define:\n" + "\n".join(missing)


def test_each_lesson_sets_an_exercise_before_the_reading_that_answers_it():
    """The course names a problem's check before the first place a lesson points at the function it
    mirrors (or at the file, where that file is the problem's whole answer)."""
    from exercises.cases import PROBLEMS

    lessons = COURSE.read_text().split("## Lesson 1", 1)[1]
    late = []
    for n, problem in PROBLEMS.items():
        file, names = problem.mirrors.split(", ", 1)
        markers = [f"`{name.strip()}`" for name in names.split("/")]
        markers += [f"`{Path(file).stem}.{name.strip()}`" for name in names.split("/")]
        if file not in ("agent.py", "algorithm.py"):  # files a lesson reads in part, for other things
            markers.append(f"](../{file})")
        check = lessons.find(f"exercises.check {n}")
        first = min((i for i in (lessons.find(m) for m in markers) if i >= 0), default=len(lessons))
        if not 0 <= check < first:
            late.append(f"problem {n}: {problem.mirrors} is read before its exercise")
    assert not late, "\n".join(late)
