#!/usr/bin/env bash
# Start a PostgreSQL server for gpupool's catalog (the release registry, Dagster's instance storage)
# in tests and demos: Debian's `postgresql`, a cluster of its own under $GPUPOOL_PG_STATE (not the
# Debian `main` cluster), listening on 127.0.0.1:$GPUPOOL_PG_PORT only, with a role and a database
# `gpupool` (password login over TCP; the role may create databases, so tests can take a fresh one
# each, and end other sessions to drop it: pg_signal_backend). Prints the URL last, and writes it to
# $GPUPOOL_PG_STATE/url.
#
# Idempotent: installs the package only when missing, creates the cluster only once, starts the
# server only when it is not running, and re-applies the password (running it again is a no-op
# otherwise). The postmaster's PID is recorded in $GPUPOOL_PG_STATE/pid; scripts/postgres-down.sh
# stops it. Needs root (it installs a package and runs the server as the `postgres` user; no
# systemd is involved).
#
# Env: GPUPOOL_PG_STATE     state dir: data, socket, log, pid, url (default /var/tmp/gpupool-postgres)
#      GPUPOOL_PG_PORT      loopback port (default 5433: 5432 is left to a system server)
#      GPUPOOL_PG_PASSWORD  password of the role `gpupool` (default gpupool: a local test server)
set -euo pipefail

STATE=${GPUPOOL_PG_STATE:-/var/tmp/gpupool-postgres}
PORT=${GPUPOOL_PG_PORT:-5433}
PASSWORD=${GPUPOOL_PG_PASSWORD:-gpupool}
DATA=$STATE/data
SOCKET_DIR=$STATE/run
started_at=$(date +%s.%N)

die() { echo "postgres-up: $*" >&2; exit 1; }
elapsed() { echo "$(date +%s.%N) $1" | awk '{printf "%.1f", $1 - $2}'; }

[ "$(id -u)" = 0 ] || die "must run as root: it installs a package and starts the server as the postgres user"
[[ "$PORT" =~ ^[0-9]+$ ]] || die "GPUPOOL_PG_PORT=$PORT: expected a port number"

# --- package --------------------------------------------------------------------------------
if ! dpkg-query -W -f='${Status}' postgresql 2>/dev/null | grep -q "install ok installed"; then
  echo "▸ installing postgresql"
  apt-get update -qq
  # the package's postinst creates (and, with systemd absent, does not start) the `main` cluster
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null \
    || die "apt-get install postgresql failed"
fi
install_s=$(elapsed "$started_at")
server_at=$(date +%s.%N)

# the newest installed major version's binaries (Debian keeps them off PATH)
BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -x "$BIN/pg_ctl" ] || die "no pg_ctl under /usr/lib/postgresql/*/bin: is the postgresql package complete?"
as_postgres() { (cd "$STATE" && setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"); }
psql_admin() { as_postgres "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$SOCKET_DIR" -p "$PORT" -U postgres -d postgres "$@"; }

# --- cluster --------------------------------------------------------------------------------
install -d -m 755 "$STATE"
install -d -o postgres -g postgres -m 700 "$DATA"
install -d -o postgres -g postgres -m 755 "$SOCKET_DIR" "$STATE/log"
if [ ! -s "$DATA/PG_VERSION" ]; then
  echo "▸ creating the cluster in $DATA"
  # local socket: peer (the postgres user administers); TCP: passwords only
  as_postgres "$BIN/initdb" -D "$DATA" -U postgres --encoding=UTF8 --locale=C \
    --auth-local=peer --auth-host=scram-sha-256 > "$STATE/log/initdb.out" 2>&1 \
    || { tail -n 20 "$STATE/log/initdb.out" >&2; die "initdb failed"; }
  echo "include_if_exists = 'gpupool.conf'" >> "$DATA/postgresql.conf"
fi
# rewritten each time, so a changed port applies at the next start
cat > "$DATA/gpupool.conf" <<EOF
# written by scripts/postgres-up.sh
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$SOCKET_DIR'
EOF
chown postgres:postgres "$DATA/gpupool.conf"

# --- server ---------------------------------------------------------------------------------
if as_postgres "$BIN/pg_ctl" status -D "$DATA" > /dev/null 2>&1; then
  echo "  postgres already running (pid $(head -n 1 "$DATA/postmaster.pid"))"
else
  echo "▸ starting postgres on 127.0.0.1:$PORT ($STATE)"
  # pg_ctl detaches the postmaster and waits (-w) until it accepts connections
  as_postgres "$BIN/pg_ctl" start -D "$DATA" -l "$STATE/log/postgres.log" -w -t 60 > "$STATE/log/pg_ctl.out" 2>&1 \
    || { tail -n 20 "$STATE/log/postgres.log" >&2; die "the server did not start (port $PORT taken? see $STATE/log/postgres.log)"; }
fi
head -n 1 "$DATA/postmaster.pid" > "$STATE/pid"

# --- role and database ----------------------------------------------------------------------
# the password goes in as a psql variable (:'password' quotes it), never spliced into SQL
psql_admin -v password="$PASSWORD" <<'SQL' || die "could not create the role and database gpupool"
select 'create role gpupool' where not exists (select from pg_roles where rolname = 'gpupool') \gexec
alter role gpupool with login createdb password :'password';
-- a test's `drop database ... with (force)` ends every session on its database, and an autovacuum
-- worker's belongs to no role the test role is a member of: without this the drop was refused now
-- and then ("must be a member of the role whose process is being terminated or member of pg_signal_backend")
grant pg_signal_backend to gpupool;
select 'create database gpupool owner gpupool' where not exists (select from pg_database where datname = 'gpupool') \gexec
SQL

urlencode() {  # RFC 3986 unreserved characters stay, every other byte is %XX
  local LC_ALL=C text=$1 out="" char i  # C: iterate bytes, so UTF-8 is encoded byte by byte
  for (( i = 0; i < ${#text}; i++ )); do
    char=${text:i:1}
    case "$char" in
      [A-Za-z0-9._~-]) out+=$char ;;
      *) out+=$(printf '%%%02X' "'$char") ;;
    esac
  done
  echo "$out"
}
url="postgresql://gpupool:$(urlencode "$PASSWORD")@127.0.0.1:$PORT/gpupool"
(umask 077; echo "$url" > "$STATE/url")

echo "▸ postgres up in $(elapsed "$started_at") s (package $install_s s, server $(elapsed "$server_at") s): pid $(cat "$STATE/pid")"
echo "$url"
