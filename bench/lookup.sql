-- Point lookup by shard key (pgbench_accounts is keyed by aid).
\set aid random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
