#!/usr/bin/env bash
# mypy over the whole clawbed distribution. Its packages live in the repository's top-level
# folders (pyproject.toml's package-dir), which mypy cannot follow through the editable
# install; so it checks a tree of links laid out as the installed package, rebuilt each run.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tree="$repo/.state/typecheck"
rm -rf "$tree"
mkdir -p "$tree/clawbed"
for f in "$repo"/clawbed/*.py; do ln -s "$f" "$tree/clawbed/"; done
for part in traces emulator claw dashboards replay orchestrator; do ln -s "$repo/$part" "$tree/clawbed/$part"; done
cd "$tree"
exec "$repo/.venv/bin/mypy" --config-file "$repo/pyproject.toml" --cache-dir "$repo/.state/mypy-cache" -p clawbed
