"""Does the course install on every laptop? Each package of requirements-course.txt (and
requirements-openenv.txt, problem 10's second line) asked of the registry for a wheel, per
operating system and Python version.

    python -m benchmarks.course_wheels              # the table, one row per package
    python -m benchmarks.course_wheels --download   # fetch each wheel into /tmp/wheels instead

Where it sits: beside the course's install (requirements-course.txt; docs/teach.md records the
table). Per cell it runs pip as a student's pip would choose a wheel for that machine:
`pip install --dry-run --no-deps --only-binary=:all: --platform P --python-version V --target T
pkg==ver` (pip's resolver and tag matching, without fetching the file; with --download,
`pip download --only-binary=:all: --platform P --python-version V --no-deps -d /tmp/wheels`).
A cell is "ok" when a wheel exists, else "none". Nothing here is installed.
"""

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
PLATFORMS = {  # the operating system -> the platform tags its pip accepts (newest first)
    "linux-x86_64": [
        "manylinux_2_28_x86_64",
        "manylinux_2_17_x86_64",
        "manylinux2014_x86_64",
        "linux_x86_64",
    ],
    "macos-arm64": ["macosx_14_0_arm64", "macosx_11_0_arm64", "macosx_11_0_universal2"],
    "macos-x86_64": [
        "macosx_14_0_x86_64",
        "macosx_10_13_x86_64",
        "macosx_10_9_x86_64",
        "macosx_10_9_universal2",
    ],
    "windows-x86_64": ["win_amd64"],
}


def requirements(*names: str) -> list[str]:
    """The pinned packages of the requirements files (comments and blank lines dropped)."""
    out = []
    for name in names:
        for line in (ROOT / name).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                out.append(line)
    return out


def has_wheel(package: str, system: str, python: str, download: bool) -> bool:
    tags = [arg for tag in PLATFORMS[system] for arg in ("--platform", tag)]
    common = ["--only-binary=:all:", "--no-deps", *tags, "--python-version", python, "-q"]
    if download:
        command = [sys.executable, "-m", "pip", "download", *common, "-d", "/tmp/wheels", package]
    else:
        target = f"/tmp/course_wheels_target/{system}-{python}"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed"]
        command += [*common, "--target", target, package]
    return subprocess.run(command, capture_output=True, text=True).returncode == 0


def table(packages: list[str], download: bool, workers: int) -> dict:
    cells = [(p, s, v) for p in packages for s in PLATFORMS for v in PYTHONS]
    with ThreadPoolExecutor(workers) as pool:
        found = list(pool.map(lambda c: has_wheel(*c, download), cells))
    return dict(zip(cells, found))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--download", action="store_true", help="fetch the wheels (pip download) instead")
    p.add_argument("--workers", type=int, default=8, help="pip processes at once")
    p.add_argument("--files", nargs="+", default=["requirements-course.txt", "requirements-openenv.txt"])
    args = p.parse_args(argv)
    packages = requirements(*args.files)
    found = table(packages, args.download, args.workers)
    print("| package | " + " | ".join(PLATFORMS) + " |")
    print("|---" * (len(PLATFORMS) + 1) + "|")
    for package in packages:
        cells = []
        for system in PLATFORMS:
            missing = [v for v in PYTHONS if not found[(package, system, v)]]
            cells.append("ok" if not missing else "none for " + ", ".join(missing))
        print(f"| {package} | " + " | ".join(cells) + " |")
    total, ok = len(found), sum(found.values())
    print(f"\n{ok} of {total} (package, system, Python) combinations have a wheel")
    return 0 if ok == total else 1


if __name__ == "__main__":
    sys.exit(main())
