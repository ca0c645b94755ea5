#!/usr/bin/env bash
# Print the path of a Python >= 3.12 (Django 6 needs it), or explain and fail.
# With an argument (scripts/find-python.sh 3.11), a Python of exactly that version: the LTS
# row's (Django 5.2 with the django-tasks backport).
set -euo pipefail
wanted=${1:-}
if [ -n "$wanted" ]; then
    candidates=(
        "python$wanted"
        /root/.pyenv/versions/"$wanted".*/bin/python
        "$HOME"/.pyenv/versions/"$wanted".*/bin/python
        python3
    )
    check="import sys; sys.exit(f'{sys.version_info[0]}.{sys.version_info[1]}' != '$wanted')"
    missing="No Python $wanted found. Install one (pyenv install $wanted), or put python$wanted on PATH."
else
    candidates=(
        "${PYTHON:-}"
        python3.13 python3.12 python3
        /root/.pyenv/versions/3.13*/bin/python
        /root/.pyenv/versions/3.12*/bin/python
        "$HOME"/.pyenv/versions/3.13*/bin/python
        "$HOME"/.pyenv/versions/3.12*/bin/python
    )
    check="import sys; sys.exit(sys.version_info < (3, 12))"
    missing="No Python 3.12 or newer found (Django 6 needs one). Install one, or set PYTHON=/path/to/python3.12."
fi
for candidate in "${candidates[@]}"; do
    [ -n "$candidate" ] || continue
    path=$(command -v "$candidate" 2>/dev/null) || continue
    if "$path" -c "$check" 2>/dev/null; then
        echo "$path"
        exit 0
    fi
done
echo "$missing" >&2
exit 1
