#!/usr/bin/env bash
# The course alone, in a fresh virtual environment (docs/teach.md, "Install"): requirements-course.txt
# and OpenEnv's server code, then every problem's reference passes its check, problem 9's runs
# list their diagnoses, and the demo trains. Exits non-zero at the first step that fails.
#     bash benchmarks/course_install.sh [venv folder, default /tmp/course_venv] [train.py's flags]
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-/tmp/course_venv}"
shift || true
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --only-binary=:all: -r requirements-course.txt
"$venv/bin/pip" install -q --no-deps --only-binary=:all: -r requirements-openenv.txt
for n in 1 2 3 4 5 6 7 8 10; do
  "$venv/bin/python" -m exercises.check "$n" --solution | tail -2
done
"$venv/bin/python" -m exercises.faults list >/dev/null
"$venv/bin/python" train.py "$@"
echo "the course installs and runs from requirements-course.txt alone ($venv)"
