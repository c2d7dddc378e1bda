#!/usr/bin/env bash
# Install PostgreSQL from Debian packages, start it on 127.0.0.1, and create a test
# database. Prints the database URL for CTXMGMT_TEST_POSTGRES_URL on its last line.
set -euo pipefail
port=${PGPORT_CTXMGMT:-5433}
if ! ls /usr/lib/postgresql/*/bin/pg_ctl > /dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  (apt-get update -qq && apt-get install -y -qq postgresql) > /dev/null
fi
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
data=/tmp/ctxmgmt-pg-$port
if [ ! -f "$data/PG_VERSION" ]; then
  rm -rf "$data" && mkdir -p "$data" && chown postgres "$data"
  su postgres -c "$bin/initdb -D $data -A trust -U postgres --no-instructions" > /dev/null
fi
if ! su postgres -c "$bin/pg_ctl -D $data status" > /dev/null 2>&1; then
  su postgres -c "$bin/pg_ctl -D $data -l $data/server.log -w -o '-h 127.0.0.1 -p $port -k /tmp' start" > /dev/null
fi
psql -h 127.0.0.1 -p "$port" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='ctxmgmt_test'" | grep -q 1 \
  || psql -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE DATABASE ctxmgmt_test" > /dev/null
echo "postgresql+psycopg://postgres@127.0.0.1:$port/ctxmgmt_test"
