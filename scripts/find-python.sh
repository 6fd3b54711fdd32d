#!/usr/bin/env bash
# Prints the path of a CPython interpreter of version $1 (such as 3.12), or fails saying so.
# Looks at PATH first (a python3.12 that runs), then at pyenv's installed versions.
set -u
version="$1"
for candidate in "$(command -v "python$version" 2>/dev/null)" \
                 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/bin/"python$version"; do
  if [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" -c "import sys" >/dev/null 2>&1; then
    echo "$candidate"
    exit 0
  fi
done
echo "find-python: no Python $version on this machine; drop it from PYTHONS_ALSO (Makefile) and" \
     "from the classifiers (pyproject.toml), or install it" >&2
exit 1
