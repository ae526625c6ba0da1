# What bench/run.sh and bench/ab.sh share; they source it.

# bench_setup NAME: sets here, root, data (a directory under /tmp that
# the caller's EXIT trap removes, with everything in it) and PGBENCH,
# builds tessera into data as bin, and exports the libpq settings both
# paths use (plaintext: Postgres here has no SSL, the router would offer
# it).
bench_setup() {
  here=$(cd "$(dirname "$0")" && pwd)
  root=$(cd "$here/.." && pwd)
  data=$(mktemp -d "/tmp/tessera-$1.XXXXXX")
  trap 'rm -rf "$data"' EXIT # until the caller's trap, which also stops what it started
  chmod 755 "$data" # Postgres runs as its own user when we are root
  bin=$data/tessera
  PGBENCH=${PGBENCH:-$(ls /usr/lib/postgresql/*/bin/pgbench | tail -1)}
  (cd "$root" && go build -o "$bin" ./cmd/tessera)
  export PGPASSWORD=postgres PGUSER=postgres PGDATABASE=postgres PGSSLMODE=disable
}

# start_dev NAME BASE_PORT ROUTER_PORT [DEV FLAGS...]: starts a one-shard
# cluster without Temporal in the background ($! is its pid), its data
# in $data/NAME, its cluster.json in $data/NAME.json, its log in
# $data/NAME.log.
start_dev() {
  local name=$1 base=$2 router=$3
  shift 3
  "$bin" dev --temporal=false "$@" --data "$data/$name" --shards 1 --replicas 0 --base-port "$base" --router-port "$router" --etcd-port 0 \
    --print-json > "$data/$name.json" 2> "$data/$name.log" &
}

# wait_dev NAME...: waits until each cluster is up, or shows its log and
# fails.
wait_dev() {
  local name
  for name; do
    for _ in $(seq 1 600); do [ -s "$data/$name.json" ] && break; sleep 0.2; done
    [ -s "$data/$name.json" ] || { cat "$data/$name.log"; exit 1; }
  done
}
