#!/usr/bin/env bash
# Checks every grafana/dashboards/*.json (or the files given) against Grafana's published schema:
# npm `typescript` + `@grafana/schema` (pinned in tests/_grafana_schema.py, installed on first use
# into ${LOOPOBS_GRAFANA_SCHEMA_DIR:-~/.cache/loopobs/grafana-schema}), `tsc --strict --noEmit`.
# Exit 0: valid; 1: schema errors (printed); 2: toolchain unavailable.
set -eu
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
exec "$PY" -m tests._grafana_schema "$@"
