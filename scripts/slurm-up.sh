#!/usr/bin/env bash
# Start a real one-node Slurm cluster for gpupool's tests and demos: Debian's Slurm with
# slurmdbd accounting in MariaDB, 8 fake GPUs (gres gpu:8), partitions `batch` (preemptible,
# requeue) and `urgent` (higher priority tier: preempts batch), accounts vision, nlp, platform,
# and slurmrestd behind socat on loopback. Everything listens on loopback only.
#
# Idempotent: installs the Debian packages only when missing, and starts only what is not
# already running (running it again when the cluster is up is a no-op). PIDs are recorded in
# $GPUPOOL_SLURM_STATE/pids (default /var/tmp/gpupool-slurm); scripts/slurm-down.sh stops them
# in reverse order. Needs root (it starts system daemons; no systemd is involved).
#
# Env: GPUPOOL_SLURM_STATE   state dir: pids, logs, spool, fake devices, dcgm job mapping
#      GPUPOOL_SLURM_REST_PORT  loopback port of slurmrestd (default 6820)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
STATE=${GPUPOOL_SLURM_STATE:-/var/tmp/gpupool-slurm}
REST_PORT=${GPUPOOL_SLURM_REST_PORT:-6820}
REST_USER=gpupool-rest
CLUSTER=gpupool
ACCOUNTS=(vision nlp platform)
PACKAGES=(slurm-wlm slurmctld slurmd slurm-client slurmdbd slurmrestd munge mariadb-server socat)
started_at=$(date +%s.%N)

die() { echo "slurm-up: $*" >&2; exit 1; }
elapsed() { echo "$(date +%s.%N) $1" | awk '{printf "%.1f", $1 - $2}'; }

[ "$(id -u)" = 0 ] || die "must run as root: it installs packages and starts system daemons"

# --- packages -------------------------------------------------------------------------------
missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "▸ installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null \
    || die "apt-get install failed"
fi
install_s=$(elapsed "$started_at")
daemons_at=$(date +%s.%N)

# --- state, fake GPUs, configuration --------------------------------------------------------
mkdir -p "$STATE"/{pids,log,run,spool/slurmctld,spool/slurmd,dev,bin,hpc-job-map}
for i in 0 1 2 3 4 5 6 7; do
  dev="$STATE/dev/nvidia$i"
  # character devices like /dev/nvidiaN; a regular file also works but leaves CUDA_VISIBLE_DEVICES empty
  [ -e "$dev" ] || mknod "$dev" c 195 "$i" 2>/dev/null || : > "$dev"
done
if [ ! -s "$STATE/dbpass" ]; then
  (umask 077; head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' > "$STATE/dbpass")
fi
dbpass=$(cat "$STATE/dbpass")

render() {  # template, destination, mode
  local tmp
  tmp=$(mktemp)
  sed -e "s|@STATE@|$STATE|g" -e "s|@FAKEDEV@|$STATE/dev|g" -e "s|@DBPASS@|$dbpass|g" "$1" > "$tmp"
  install -D -m "$3" "$tmp" "$2"
  rm -f "$tmp"
}
mkdir -p /etc/slurm
render "$HERE/slurm/slurm.conf" /etc/slurm/slurm.conf 644
render "$HERE/slurm/gres.conf" /etc/slurm/gres.conf 644
render "$HERE/slurm/cgroup.conf" /etc/slurm/cgroup.conf 644
render "$HERE/slurm/slurmdbd.conf" /etc/slurm/slurmdbd.conf 600
for script in prolog-hpc-job-map.sh epilog-hpc-job-map.sh; do
  sed "s|/run/dcgm-job-map|$STATE/hpc-job-map|" "$HERE/slurm/$script" > "$STATE/bin/$script"
  chmod 755 "$STATE/bin/$script"
done

# --- daemons --------------------------------------------------------------------------------
# pids/<order>-<name> holds the PID; the order is the start order, reversed by slurm-down.sh
alive() {  # pid file, process name
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1")
  kill -0 "$pid" 2>/dev/null && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q "$2"
}

start() {  # order-name, process name, command...
  local pidfile="$STATE/pids/$1" name=$2
  shift 2
  if alive "$pidfile" "$name"; then
    echo "  $name already running (pid $(cat "$pidfile"))"
    return
  fi
  # never through a pipe: a daemon holding the pipe open would hang this script
  setsid nohup "$@" > "$STATE/log/$name.out" 2>&1 < /dev/null &
  echo $! > "$pidfile"
  echo "  started $name (pid $!)"
}

wait_until() {  # seconds, what, command...
  local deadline=$(( $(date +%s) + $1 )) what=$2
  shift 2
  until "$@" > /dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "slurm-up: timed out waiting for $what; last log lines:" >&2
      tail -n 20 "$STATE"/log/*.out "$STATE"/log/*.log >&2 2>/dev/null || true
      exit 1
    fi
    sleep 0.2
  done
}

echo "▸ starting the Slurm cluster ($STATE)"
install -d -o munge -g munge -m 755 /run/munge
start 1-munge munged setpriv --reuid=munge --regid=munge --init-groups -- /usr/sbin/munged -F
wait_until 15 munge bash -c 'munge -n | unmunge'

install -d -o mysql -g mysql /run/mysqld
if mariadb-admin --silent ping > /dev/null 2>&1 && ! alive "$STATE/pids/2-mariadb" mariadbd; then
  echo "  MariaDB already running (not started here: left alone by slurm-down.sh)"
else
  if [ ! -d /var/lib/mysql/mysql ]; then
    mariadb-install-db --user=mysql > "$STATE/log/mariadb-install.out" 2>&1 || die "mariadb-install-db failed"
  fi
  # Slurm's recommended InnoDB settings (slurmdbd warns without them): with MariaDB's 50 s lock wait, a
  # job record that waits behind the hourly rollup or an sacctmgr change is dropped and retried, and
  # sacct misses the job for minutes; a test database needs no flush to disk at every commit
  start 2-mariadb mariadbd /usr/sbin/mariadbd --user=mysql --bind-address=127.0.0.1 --port=3306 \
    --innodb-buffer-pool-size=1G --innodb-lock-wait-timeout=900 --innodb-log-file-size=64M \
    --innodb-flush-log-at-trx-commit=2
  wait_until 60 MariaDB mariadb-admin --silent ping
fi
# slurmctld starts afresh and numbers its jobs from 1 again: accounting kept from an earlier cluster would
# answer for the same job ids (sacct --jobs=N lists both), so a cluster started here starts its accounting afresh
if ! alive "$STATE/pids/4-slurmctld" slurmctld; then
  mariadb -e "drop database if exists slurm_acct_db;" || die "could not reset the accounting database"
fi
mariadb -e "create database if not exists slurm_acct_db;
  create user if not exists 'slurm'@'localhost' identified by '$dbpass';
  alter user 'slurm'@'localhost' identified by '$dbpass';
  grant all on slurm_acct_db.* to 'slurm'@'localhost';" || die "could not create the accounting database"

start 3-slurmdbd slurmdbd /usr/sbin/slurmdbd -D
wait_until 30 slurmdbd sacctmgr -n show cluster

sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER" || sacctmgr -i add cluster "$CLUSTER" > /dev/null
id -u "$REST_USER" > /dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$REST_USER"
for account in "${ACCOUNTS[@]}"; do
  sacctmgr -n -P show account "$account" format=account | grep -qx "$account" \
    || sacctmgr -i add account "$account" Cluster="$CLUSTER" Description="$account team" Organization=gpupool > /dev/null
  sacctmgr -n -P show assoc where user=root account="$account" format=account | grep -qx "$account" \
    || sacctmgr -i add user root Account="$account" Cluster="$CLUSTER" > /dev/null
done
sacctmgr -n -P show assoc where user="$REST_USER" format=account | grep -qx platform \
  || sacctmgr -i add user "$REST_USER" Account=platform Cluster="$CLUSTER" > /dev/null
# whoever ran this through sudo may submit jobs too (associations are enforced)
if [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then
  sacctmgr -n -P show assoc where user="$SUDO_USER" format=account | grep -qx vision \
    || sacctmgr -i add user "$SUDO_USER" Account="$(IFS=,; echo "${ACCOUNTS[*]}")" DefaultAccount=vision \
         Cluster="$CLUSTER" > /dev/null
fi

start 4-slurmctld slurmctld /usr/sbin/slurmctld -D -i
wait_until 30 slurmctld bash -c 'scontrol ping | grep -q UP'
start 5-slurmd slurmd /usr/sbin/slurmd -D
node_ready() {
  local state
  state=$(sinfo -h -N -n localhost -o %T 2>/dev/null | sort -u | head -n 1) || return 1
  case "$state" in
    idle|mixed|allocated|completing) return 0 ;;
    drained|draining|drain*) scontrol update nodename=localhost state=resume > /dev/null 2>&1; return 1 ;;
    *) return 1 ;;
  esac
}
wait_until 30 "the node to be idle" node_ready

install -d -o "$REST_USER" -g "$REST_USER" -m 755 "$STATE/restd"
as_rest=(setpriv --reuid="$REST_USER" --regid="$REST_USER" --init-groups --)
if ! alive "$STATE/pids/6-slurmrestd" slurmrestd; then
  rm -f "$STATE/restd/restd.sock"
fi
# Debian's build has no auth/jwt: rest_auth/local on a unix socket, as an ordinary user
start 6-slurmrestd slurmrestd "${as_rest[@]}" /usr/sbin/slurmrestd -a rest_auth/local \
  -s openapi/v0.0.38,openapi/dbv0.0.38 "unix:$STATE/restd/restd.sock"
wait_until 15 slurmrestd test -S "$STATE/restd/restd.sock"
start 7-socat socat "${as_rest[@]}" /usr/bin/socat \
  "TCP-LISTEN:$REST_PORT,bind=127.0.0.1,fork,reuseaddr" "UNIX-CONNECT:$STATE/restd/restd.sock"
wait_until 15 "slurmrestd on 127.0.0.1:$REST_PORT" bash -c "exec 3<>/dev/tcp/127.0.0.1/$REST_PORT"

echo "▸ slurm up in $(elapsed "$started_at") s (packages $install_s s, daemons $(elapsed "$daemons_at") s):" \
  "cluster $CLUSTER, partitions batch/urgent, gres gpu:8, slurmrestd http://127.0.0.1:$REST_PORT"
