#!/usr/bin/env bash
# Measures the router against direct Postgres in the same run, interleaved:
# pgbench point lookups by shard key (lookup.sql) through the router
# (127.0.0.1:ROUTER) and straight to shard-0's primary, several rounds each,
# then reports the TPS ratio and the router's plus sidecar's CPU time per
# transaction (CPU of the `tessera dev` process, which runs both, divided by
# the transactions it served; the cluster runs without Temporal so that
# only the router, the sidecar, etcd and pgmanager share that process).
#
# The router reaches the sidecar by function call, as it does in
# `tessera dev` (one hop); -u makes it go by the sidecar's unix socket, as
# a router in another process on the same machine would (two hops).
#
#   bench/run.sh [-c CLIENTS] [-T SECONDS] [-r ROUNDS] [-s SCALE] [-M simple|extended|prepared] [-u]
set -euo pipefail
clients=8 seconds=15 rounds=3 scale=10 mode=prepared hop=
while getopts "c:T:r:s:M:u" o; do
  case $o in c) clients=$OPTARG;; T) seconds=$OPTARG;; r) rounds=$OPTARG;; s) scale=$OPTARG;; M) mode=$OPTARG;; u) hop=--router-over-sockets;; *) exit 2;; esac
done
. "$(dirname "$0")/lib.sh"
bench_setup bench
# shellcheck disable=SC2086
start_dev d 25533 26532 $hop
devpid=$!
trap 'kill -INT $devpid 2>/dev/null; wait $devpid 2>/dev/null; rm -rf "$data"' EXIT
wait_dev d
direct="-h 127.0.0.1 -p 25533"
router="-h 127.0.0.1 -p 26532"
"$PGBENCH" -i -q -s "$scale" $direct >/dev/null 2>&1

cpu() { awk '{print $14 + $15}' "/proc/${1:-$devpid}/stat"; }   # clock ticks of a process
tick=$(getconf CLK_TCK)
tps() { sed -n 's/^tps = \([0-9.]*\) .*/\1/p' | head -1; }
txs() { sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p'; }

# PgBouncer, when installed, is measured in the same rounds as the
# reference for one hop: in transaction mode, or in session mode for
# -M prepared where the installed version cannot keep prepared
# statements across transactions (before 1.21). It reaches Postgres over
# the instance's unix socket, as the sidecar does: over TCP it loses a
# sixth of its throughput here, which would flatter the router.
bouncer=
if command -v pgbouncer >/dev/null; then
  pool=transaction extra="max_prepared_statements = 100"
  if ! pgbouncer --version | awk 'NR==1{split($2,v,"."); exit !(v[1]>1 || v[2]>=21)}'; then
    extra=
    [ "$mode" = prepared ] && pool=session
  fi
  mkdir -p "$data/pgbouncer"
  socketdir=$(dirname "$(ls "$data"/d/shards/*/*/run/.s.PGSQL.25533 | head -1)")
  cat > "$data/pgbouncer/pgbouncer.ini" <<EOT
[databases]
postgres = host=$socketdir port=25533 dbname=postgres user=postgres password=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = 26600
unix_socket_dir =
auth_type = plain
auth_file = $data/pgbouncer/users.txt
pool_mode = $pool
default_pool_size = $((clients + 2))
$extra
logfile = $data/pgbouncer/pgbouncer.log
pidfile = $data/pgbouncer/pgbouncer.pid
EOT
  echo '"postgres" "postgres"' > "$data/pgbouncer/users.txt"
  # PgBouncer refuses to run as root.
  as=(); [ "$(id -u)" = 0 ] && { chown -R postgres "$data/pgbouncer"; as=(runuser -u postgres --); }
  "${as[@]}" pgbouncer -d "$data/pgbouncer/pgbouncer.ini" && bouncer="-h 127.0.0.1 -p 26600"
  trap 'kill $(cat "$data/pgbouncer/pgbouncer.pid" 2>/dev/null) 2>/dev/null; kill -INT $devpid 2>/dev/null; wait $devpid 2>/dev/null; rm -rf "$data"' EXIT
  sleep 0.5
fi

bench() { "$PGBENCH" "$@" -n -M "$mode" -c "$clients" -j 2 -T "$seconds" -f "$here/lookup.sql" 2>&1; }
dsum=0 rsum=0 bsum=0 cpusum=0 txsum=0 bcpusum=0 btxsum=0
for r in $(seq 1 "$rounds"); do
  d=$(bench $direct)
  before=$(cpu)
  o=$(bench $router)
  after=$(cpu)
  dt=$(echo "$d" | tps); rt=$(echo "$o" | tps); n=$(echo "$o" | txs)
  line="round $r: direct $dt tps, router $rt tps"
  if [ -n "$bouncer" ]; then
    bpid=$(cat "$data/pgbouncer/pgbouncer.pid")
    bbefore=$(cpu "$bpid")
    b=$(bench $bouncer)
    bafter=$(cpu "$bpid")
    bt=$(echo "$b" | tps)
    line="$line, pgbouncer $bt tps"
    bsum=$(echo "$bsum + ${bt:-0}" | bc -l)
    bcpusum=$((bcpusum + bafter - bbefore)); btxsum=$((btxsum + $(echo "$b" | txs)))
  fi
  echo "$line"
  dsum=$(echo "$dsum + $dt" | bc -l); rsum=$(echo "$rsum + $rt" | bc -l)
  cpusum=$((cpusum + after - before)); txsum=$((txsum + n))
done
ratio=$(echo "$rsum / $dsum" | bc -l)
us=$(echo "$cpusum / $tick * 1000000 / $txsum" | bc -l)
printf 'clients %d, mode %s: router/direct TPS ratio %.2f; router+sidecar CPU %.1f us per transaction\n' "$clients" "$mode" "$ratio" "$us"
if [ -n "$bouncer" ]; then
  printf 'pgbouncer (%s mode)/direct TPS ratio %.2f; router/pgbouncer %.2f; pgbouncer CPU %.1f us per transaction\n' "$pool" \
    "$(echo "$bsum / $dsum" | bc -l)" "$(echo "$rsum / $bsum" | bc -l)" "$(echo "$bcpusum / $tick * 1000000 / $btxsum" | bc -l)"
fi
