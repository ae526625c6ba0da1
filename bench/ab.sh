#!/usr/bin/env bash
# Compares two configurations of `tessera dev` side by side: both
# clusters run at once (each idle while the other is measured), and
# every round measures A direct, A's router, B direct, B's router with
# pgbench point lookups (lookup.sql), so that the machine's drift, which
# moves direct Postgres by a third between runs here, falls on both.
# Each round prints both router/direct ratios; the last line, their
# means.
#
#   bench/ab.sh [-a "DEV FLAGS"] [-b "DEV FLAGS"] [-c CLIENTS] [-T SECONDS] [-r ROUNDS] [-M MODE]
#
# For example, pipelined connections on (A) against off (B):
#   bench/ab.sh -b "--pipeline-conns -1"
set -euo pipefail
a= b= clients=8 seconds=8 rounds=4 mode=prepared
while getopts "a:b:c:T:r:M:" o; do
  case $o in a) a=$OPTARG;; b) b=$OPTARG;; c) clients=$OPTARG;; T) seconds=$OPTARG;; r) rounds=$OPTARG;; M) mode=$OPTARG;; *) exit 2;; esac
done
. "$(dirname "$0")/lib.sh"
bench_setup ab
# shellcheck disable=SC2086
start_dev a 25533 26532 $a; pa=$!
# shellcheck disable=SC2086
start_dev b 27533 28532 $b; pb=$!
trap 'kill -INT $pa $pb 2>/dev/null; wait $pa $pb 2>/dev/null; rm -rf "$data"' EXIT
wait_dev a b
"$PGBENCH" -i -q -s 10 -h 127.0.0.1 -p 25533 >/dev/null 2>&1
"$PGBENCH" -i -q -s 10 -h 127.0.0.1 -p 27533 >/dev/null 2>&1
tps() { "$PGBENCH" -h 127.0.0.1 -p "$1" -n -M "$mode" -c "$clients" -j 2 -T "$seconds" -f "$here/lookup.sql" 2>&1 |
  sed -n 's/^tps = \([0-9.]*\) .*/\1/p'; }
asum=0 bsum=0
for r in $(seq 1 "$rounds"); do
  ad=$(tps 25533); ar=$(tps 26532); bd=$(tps 27533); br=$(tps 28532)
  ra=$(echo "$ar / $ad" | bc -l); rb=$(echo "$br / $bd" | bc -l)
  printf 'round %d: A direct %.0f router %.0f ratio %.2f | B direct %.0f router %.0f ratio %.2f\n' "$r" "$ad" "$ar" "$ra" "$bd" "$br" "$rb"
  asum=$(echo "$asum + $ra" | bc -l); bsum=$(echo "$bsum + $rb" | bc -l)
done
printf 'mean router/direct: A (%s) %.2f, B (%s) %.2f\n' "${a:-defaults}" "$(echo "$asum / $rounds" | bc -l)" "${b:-defaults}" "$(echo "$bsum / $rounds" | bc -l)"
