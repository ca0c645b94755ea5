#!/usr/bin/env bash
# Print the path of a Python >= 3.12 (Django 6 needs it), or explain and fail.
set -euo pipefail
candidates=(
    "${PYTHON:-}"
    python3.13 python3.12 python3
    /root/.pyenv/versions/3.13*/bin/python
    /root/.pyenv/versions/3.12*/bin/python
    "$HOME"/.pyenv/versions/3.13*/bin/python
    "$HOME"/.pyenv/versions/3.12*/bin/python
)
for candidate in "${candidates[@]}"; do
    [ -n "$candidate" ] || continue
    path=$(command -v "$candidate" 2>/dev/null) || continue
    if "$path" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
        echo "$path"
        exit 0
    fi
done
echo "No Python 3.12 or newer found (Django 6 needs one). Install one, or set PYTHON=/path/to/python3.12." >&2
exit 1
