#!/usr/bin/env bash
# A throwaway PostgreSQL server for trying several sweeps on one study, and for the
# concurrency tests. Prints the SQLAlchemy URL to pass as --storage (needs psycopg:
# pip install -e ".[postgres]"). Data lives in a temporary folder; stop it with
#   scripts/pg_throwaway.sh stop
# Needs Debian's postgresql package (apt-get install postgresql). As root, the server
# runs as the postgres user, since initdb refuses root.
set -euo pipefail
PORT=${FA2_PG_PORT:-54329}
STATE=/tmp/fa2-pg-$PORT
BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$BIN" ]; then echo "PostgreSQL is not installed here: apt-get install postgresql" >&2; exit 2; fi
as_owner() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi; }
if [ "${1:-start}" = stop ]; then
  as_owner "$BIN/pg_ctl -D $STATE -m fast stop" >/dev/null && rm -rf "$STATE"; exit 0
fi
if [ ! -f "$STATE/PG_VERSION" ]; then
  mkdir -p "$STATE"; [ "$(id -u)" = 0 ] && chown postgres "$STATE"
  as_owner "$BIN/initdb -D $STATE -A trust -U postgres" >/dev/null
fi
as_owner "$BIN/pg_ctl -D $STATE -l $STATE/server.log -w -o '-p $PORT -k /tmp -c listen_addresses=127.0.0.1' start" >/dev/null \
  || as_owner "$BIN/pg_ctl -D $STATE status" >/dev/null
echo "postgresql+psycopg://postgres@127.0.0.1:$PORT/postgres"
