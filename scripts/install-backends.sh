#!/usr/bin/env bash
# Installs the real backends the end-to-end tests run against, when missing:
#   - Prometheus + promtool from Debian's `prometheus` package;
#   - Arize Phoenix (a real OTLP receiver) in its own venv, since it pins many packages.
#   - npm typescript + @grafana/schema (pinned) for the offline Grafana dashboard schema check.
#   - Chromium from Debian's `chromium` package, for the HTML report's browser tests.
#   - redis-server from Debian's `redis-server` package, for the fleet tests (loopobs.redis).
# Writes scripts/backends.env, which `make test` sources so the tests find them.
# Outside CI a backend that cannot be installed is reported and its tests skip;
# in CI (CI=true) it is a failure.
set -u
cd "$(dirname "$0")/.."
PHOENIX_VENV="${LOOPOBS_PHOENIX_VENV:-$HOME/.cache/loopobs/phoenix-venv}"
status=0

if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  echo "install-backends: installing Prometheus (Debian package)"
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus) \
      >/tmp/loopobs-prometheus-install.log 2>&1 || { echo "install-backends: apt-get failed, see /tmp/loopobs-prometheus-install.log"; status=1; }
  else
    echo "install-backends: cannot install Prometheus here (needs root and apt-get)"; status=1
  fi
fi

if ! command -v redis-server >/dev/null 2>&1; then
  echo "install-backends: installing Redis (Debian package)"
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server) \
      >/tmp/loopobs-redis-install.log 2>&1 || { echo "install-backends: apt-get failed, see /tmp/loopobs-redis-install.log"; status=1; }
  else
    echo "install-backends: cannot install Redis here (needs root and apt-get)"; status=1
  fi
fi

if ! command -v chromium >/dev/null 2>&1; then
  echo "install-backends: installing Chromium (Debian package)"
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium) \
      >/tmp/loopobs-chromium-install.log 2>&1 || { echo "install-backends: apt-get failed, see /tmp/loopobs-chromium-install.log"; status=1; }
  else
    echo "install-backends: cannot install Chromium here (needs root and apt-get)"; status=1
  fi
fi

if [ ! -x "$PHOENIX_VENV/bin/phoenix" ]; then
  echo "install-backends: installing Arize Phoenix into $PHOENIX_VENV (about 30 s, 850 MB)"
  mkdir -p "$(dirname "$PHOENIX_VENV")"
  (python3 -m venv "$PHOENIX_VENV" && "$PHOENIX_VENV/bin/pip" install -q --disable-pip-version-check -U pip \
     && "$PHOENIX_VENV/bin/pip" install -q --disable-pip-version-check "arize-phoenix==${LOOPOBS_PHOENIX_VERSION:-20.26.1}") \
    >/tmp/loopobs-phoenix-install.log 2>&1 || { echo "install-backends: Phoenix install failed, see /tmp/loopobs-phoenix-install.log"; status=1; }
fi

# Grafana dashboard schema check (tests/test_grafana_static.py, scripts/check-dashboards.sh):
# npm typescript + @grafana/schema at the versions pinned in tests/_grafana_schema.py.
GRAFANA_SCHEMA_DIR="${LOOPOBS_GRAFANA_SCHEMA_DIR:-$HOME/.cache/loopobs/grafana-schema}"
if command -v npm >/dev/null 2>&1; then
  LOOPOBS_GRAFANA_SCHEMA_DIR="$GRAFANA_SCHEMA_DIR" python3 -m tests._grafana_schema --install \
    >/tmp/loopobs-grafana-schema-install.log 2>&1 \
    || { echo "install-backends: Grafana schema toolchain failed, see /tmp/loopobs-grafana-schema-install.log"; status=1; }
else
  echo "install-backends: npm not found; the Grafana dashboard schema check needs node and npm"; status=1
fi

{
  echo "export LOOPOBS_PHOENIX_BIN=$PHOENIX_VENV/bin/phoenix"
  echo "export LOOPOBS_PROMETHEUS_BIN=$(command -v prometheus || echo /usr/bin/prometheus)"
  echo "export LOOPOBS_PROMTOOL_BIN=$(command -v promtool || echo /usr/bin/promtool)"
  echo "export LOOPOBS_GRAFANA_SCHEMA_DIR=$GRAFANA_SCHEMA_DIR"
  echo "export LOOPOBS_REDIS_BIN=$(command -v redis-server || echo /usr/bin/redis-server)"
  echo "export LOOPOBS_CHROMIUM_BIN=$(command -v chromium || echo /usr/bin/chromium)"
} > scripts/backends.env

if [ "$status" != 0 ] && [ "${CI:-}" = "true" ]; then
  echo "install-backends: a backend is missing and CI requires it"; exit 1
fi
exit 0
