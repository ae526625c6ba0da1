-- The differential corpus (TestDifferential): each statement runs on one
-- plain Postgres and through the router; the router must answer the same
-- or refuse with 0A000. A statement ends with ";" at the end of a line.
-- Tables: items (sharded by k), events (colocated on k), kinds
-- (reference), notes (unsharded).

-- Filters and projections, scattered.
SELECT * FROM items;
SELECT k, name FROM items WHERE qty > 3;
SELECT k FROM items WHERE qty IS NULL;
SELECT k FROM items WHERE qty IS NOT NULL AND small = 1;
SELECT k FROM items WHERE name = 'beta';
SELECT k FROM items WHERE name IS DISTINCT FROM 'beta';
SELECT k FROM items WHERE name = '';
SELECT k FROM items WHERE name LIKE '%a%';
SELECT k FROM items WHERE name ILIKE 'g%';
SELECT k FROM items WHERE flag;
SELECT k FROM items WHERE NOT flag;
SELECT k FROM items WHERE flag IS UNKNOWN;
SELECT k FROM items WHERE price > 5.5;
SELECT k FROM items WHERE price BETWEEN 1 AND 4;
SELECT k FROM items WHERE ratio = 0.5;
SELECT k FROM items WHERE ratio > 0.25 OR ratio IS NULL;
SELECT k FROM items WHERE day = DATE '2024-01-03';
SELECT k FROM items WHERE at > TIMESTAMPTZ '2024-03-01 12:00:00+00' AND at < TIMESTAMPTZ '2024-03-02 00:00:00+00';
SELECT k FROM items WHERE uid = '00000002-0000-4000-8000-000000000003';
SELECT k, doc->>'tag' FROM items WHERE doc @> '{"even": true}';
SELECT k FROM items WHERE doc ? 'k' AND (doc->>'k')::int > 40;
SELECT k FROM items WHERE 't1' = ANY (tags);
SELECT k FROM items WHERE tags @> ARRAY['t0'];
SELECT k, tags[1] FROM items WHERE cardinality(tags) = 2;
SELECT k FROM items WHERE kind IN (1, 3);
SELECT k FROM items WHERE kind NOT IN (1, 3);
SELECT k FROM items WHERE big > 30000000000000;
SELECT k FROM items WHERE small::int + qty > 10;
SELECT k FROM items WHERE false;
SELECT k FROM items WHERE k > 100;
SELECT k FROM items WHERE k BETWEEN 10 AND 20;
SELECT k FROM items WHERE k % 2 = 0;
SELECT k FROM items WHERE k = 5 OR k = 40;
SELECT k FROM items WHERE k = ANY ('{1,2,3}'::bigint[]);
SELECT k FROM items WHERE NOT (k = 5);
SELECT k FROM items WHERE k <> 5;
SELECT k FROM items WHERE (k = 5) IS NOT TRUE;
SELECT k FROM items WHERE k = 5 OR true;
SELECT k FROM items WHERE k = 5 AND (k = 6 OR true);
SELECT k FROM items WHERE k IS NULL;
SELECT k FROM items WHERE k = NULL;
SELECT k FROM items WHERE k IN (5, NULL);
SELECT k FROM items WHERE k NOT IN (5, 6);
SELECT upper(name), length(name), k * 2 AS twice FROM items;
SELECT k, coalesce(name, '(none)'), nullif(qty, 0) FROM items;
SELECT k, CASE WHEN qty > 5 THEN 'big' WHEN qty IS NULL THEN 'none' ELSE 'small' END FROM items;
SELECT k, greatest(small, qty), least(small, qty) FROM items;
SELECT k, price * 2, price / 3, round(price, 1) FROM items;
SELECT k, ratio * 3, ratio::numeric(6,3) FROM items;
SELECT k, big + 1, big / 7, big % 1000 FROM items;
SELECT k::text, small::text, qty::float8, price::int FROM items;
SELECT k, day + 1, day - DATE '2024-01-01', extract(dow FROM day) FROM items;
SELECT k, at + interval '1 day', date_trunc('day', at) FROM items;
SELECT k, uid::text, doc, tags FROM items;
SELECT k, doc->'k', doc #>> '{tag}', jsonb_typeof(doc) FROM items;
SELECT k, array_length(tags, 1), array_to_string(tags, '|') FROM items;
SELECT k, flag AND qty > 2, flag OR qty > 2, NOT flag FROM items;
SELECT k, name || '!' AS shout, substr(name, 2) FROM items;
SELECT k, qty / NULLIF(small, 0) FROM items;
SELECT k, 1 / (k - 7) FROM items;
SELECT k, small / 0 FROM items WHERE small IS NULL;
SELECT k, (qty::int2 * 10000)::int2 FROM items;
SELECT k, big * big FROM items;
SELECT k, 'x'::int FROM items;
SELECT k, nosuch FROM items;
SELECT * FROM nosuch;
SELECT k, name COLLATE "C" FROM items;
SELECT k, to_char(at, 'YYYY-MM-DD HH24:MI') FROM items;
SELECT k, row(k, name) FROM items;
SELECT k, ARRAY[k, qty] FROM items;

-- Key predicates: one shard, or several.
SELECT * FROM items WHERE k = 5;
SELECT * FROM items WHERE k = 40;
SELECT * FROM items WHERE k = 1000;
SELECT * FROM items WHERE k IN (1, 2, 3, 40);
SELECT * FROM items WHERE k = '5';
SELECT * FROM items WHERE k = 5::int2;
SELECT * FROM items WHERE k = CAST(5 AS int4);
SELECT * FROM items WHERE k = 5.0;
SELECT * FROM items WHERE k = 5.5;
SELECT * FROM items WHERE k = 99999999999999999999;
SELECT * FROM items WHERE k = 1e0;
SELECT * FROM items WHERE k = -0;
SELECT * FROM items WHERE k = 9223372036854775807;
SELECT * FROM items WHERE k = ' 5';
SELECT * FROM items WHERE k = '5 ';
SELECT * FROM items WHERE k = '+5';
SELECT * FROM items WHERE k = '05';
SELECT * FROM items WHERE k = 'five';
SELECT * FROM items WHERE 5 = k;
SELECT * FROM items WHERE (k) = 5;
SELECT * FROM items WHERE k = 5 AND qty > 100;
SELECT * FROM items WHERE k = 5 AND k = 6;
SELECT * FROM items WHERE k IN (5) AND k IN (6);
SELECT * FROM items i WHERE i.k = 5;
SELECT * FROM public.items WHERE k = 5;
SELECT count(*) FROM items WHERE k = 5;
SELECT sum(qty), avg(price), max(name) FROM items WHERE k = 7;
SELECT name, count(*) FROM items WHERE k IN (7, 7) GROUP BY name;
SELECT DISTINCT name FROM items WHERE k = 5;
SELECT k, row_number() OVER (ORDER BY k) FROM items WHERE k = 5;
SELECT * FROM events WHERE k = 7 ORDER BY seq;
SELECT * FROM events WHERE k = 7 ORDER BY seq DESC LIMIT 1;

-- Counts, summed across shards.
SELECT count(*) FROM items;
SELECT count(qty) FROM items;
SELECT count(*), count(name), count(flag) FROM items;
SELECT count(*) AS n FROM items WHERE qty > 3;
SELECT count(*) FROM items WHERE false;
SELECT count(*) FILTER (WHERE flag) FROM items;
SELECT count(k) FILTER (WHERE qty IS NULL), count(*) FROM items;
SELECT count(*) FROM events;
SELECT count(1) FROM items;
SELECT count(NULL) FROM items;
SELECT count(*) FROM items i JOIN events e ON e.k = i.k;
SELECT count(*) FROM items i, kinds kd WHERE kd.code = i.kind;
SELECT count(*) FROM items i LEFT JOIN events e ON e.k = i.k;
SELECT count(*) FROM items WHERE EXISTS (SELECT 1 FROM events e WHERE e.k = items.k);
SELECT count(*) FROM items WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.k = items.k);
SELECT count(*) FROM items WHERE k IN (SELECT k FROM events);
SELECT count(*) FROM items WHERE k NOT IN (SELECT k FROM events);
SELECT count(*) FROM (SELECT k FROM items WHERE qty > 2) s;
WITH x AS (SELECT * FROM items WHERE flag) SELECT count(*) FROM x;
SELECT count(*) FROM items, generate_series(1, 3);
SELECT count(*) + 1 FROM items;
SELECT count(*), 1 FROM items;
SELECT count(DISTINCT name) FROM items;
SELECT count(*) FROM items GROUP BY ();
SELECT count(*) FROM items HAVING count(*) > 0;
SELECT count(*) FROM items LIMIT 1;
SELECT count(*) FROM items ORDER BY 1;
SELECT (SELECT count(*) FROM kinds) FROM items;
SELECT count(*) FROM items WHERE qty > (SELECT min(qty) FROM items);
SELECT count(*) FROM items WHERE kind IN (SELECT code FROM kinds);
SELECT count(*)::int FROM items;
SELECT count(*) FROM items i JOIN events e ON e.k = i.qty;
SELECT count(*) FROM items CROSS JOIN events;
SELECT count(*) FROM items i JOIN notes n ON n.k = i.k;

-- Aggregates beyond counts.
SELECT sum(qty) FROM items;
SELECT sum(big) FROM items;
SELECT avg(price) FROM items;
SELECT min(k), max(k) FROM items;
SELECT min(name), max(day) FROM items;
SELECT bool_and(flag), bool_or(flag), every(flag) FROM items;
SELECT string_agg(name, ',' ORDER BY k) FROM items;
SELECT array_agg(k ORDER BY k) FROM items;
SELECT jsonb_agg(doc ORDER BY k) FROM items;
SELECT stddev(qty), variance(qty) FROM items;
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY qty) FROM items;
SELECT mode() WITHIN GROUP (ORDER BY name) FROM items;
SELECT sum(qty) FILTER (WHERE flag) FROM items;
SELECT count(*), sum(qty) FROM items WHERE false;
SELECT max(qty) FROM items WHERE k > 1000;
SELECT bit_or(qty), bit_and(small) FROM items;
SELECT json_object_agg(k, name) FROM items WHERE k < 4;

-- GROUP BY, HAVING, DISTINCT.
SELECT name, count(*) FROM items GROUP BY name;
SELECT kind, sum(qty) FROM items GROUP BY kind;
SELECT kind, count(*) FROM items GROUP BY kind HAVING count(*) > 11;
SELECT flag, count(*) FROM items GROUP BY flag ORDER BY flag;
SELECT day, min(k) FROM items GROUP BY day;
SELECT qty, count(*) FROM items GROUP BY ROLLUP (qty);
SELECT kind, flag, count(*) FROM items GROUP BY CUBE (kind, flag);
SELECT kind, count(*) FROM items GROUP BY GROUPING SETS ((kind), ());
SELECT DISTINCT name FROM items;
SELECT DISTINCT kind FROM items ORDER BY kind;
SELECT DISTINCT ON (kind) kind, k FROM items ORDER BY kind, k;
SELECT DISTINCT name FROM items LIMIT 3;
SELECT name FROM items GROUP BY name LIMIT 10;
SELECT k, count(*) FROM events GROUP BY k;
SELECT i.k, count(e.seq) FROM items i LEFT JOIN events e ON e.k = i.k GROUP BY i.k;

-- The router's engine (router/engine): partial aggregates finished
-- across shards, groups merged by key, DISTINCT, k-way merges, LIMIT and
-- OFFSET after a merge; and what it still refuses.
SELECT kind, count(*), sum(qty), min(qty), max(qty) FROM items GROUP BY kind;
SELECT kind, sum(big), sum(price) FROM items GROUP BY kind;
SELECT sum(small), sum(price), sum(big), min(small), max(big) FROM items;
SELECT sum(price), sum(big), min(qty), bool_and(flag) FROM items WHERE false;
SELECT min(qty), max(qty), bool_and(flag), bool_or(flag), sum(big), count(*) FROM items WHERE k > 1000;
SELECT flag, count(*), sum(qty), bool_or(qty > 3) FROM items GROUP BY flag;
SELECT name, count(*) AS n FROM items GROUP BY name ORDER BY n DESC LIMIT 3;
SELECT kind, count(*) AS n FROM items GROUP BY kind ORDER BY n DESC, kind LIMIT 2;
SELECT kind, count(*) FROM items GROUP BY kind ORDER BY 1 NULLS FIRST OFFSET 1;
SELECT kind, max(qty) FROM items GROUP BY 1 ORDER BY 2 DESC NULLS LAST, 1;
SELECT k, count(*) FROM events GROUP BY k ORDER BY 2 DESC, 1 LIMIT 5;
SELECT k, sum(seq), sum(amount), min(kind) FROM events GROUP BY k;
SELECT count(*) FILTER (WHERE flag), sum(qty) FILTER (WHERE kind = 1), max(k) FILTER (WHERE qty > 2) FROM items;
SELECT day, count(*) FROM items GROUP BY day;
SELECT uid, count(*), sum(small) FROM items GROUP BY uid;
SELECT name, flag, count(*) FROM items GROUP BY name, flag;
SELECT kind, count(*) FROM items WHERE qty > $1 GROUP BY kind; -- args: [2]
SELECT kind, sum(qty) FROM items WHERE k IN (1, 2, 3, 40) GROUP BY kind;
SELECT kind AS c, count(k) AS n FROM items GROUP BY kind ORDER BY c DESC LIMIT 4 OFFSET 1;
SELECT DISTINCT kind, flag FROM items;
SELECT DISTINCT kind FROM items ORDER BY kind DESC LIMIT 3;
SELECT DISTINCT qty FROM items ORDER BY 1 LIMIT 4 OFFSET 2;
SELECT DISTINCT day FROM items;
SELECT DISTINCT uid FROM items LIMIT 100;
SELECT k, qty FROM items ORDER BY qty DESC, k LIMIT 5 OFFSET 3;
SELECT k FROM items ORDER BY k OFFSET 45;
SELECT k FROM items ORDER BY k LIMIT 0 OFFSET 2;
SELECT k, flag FROM items ORDER BY flag, k DESC LIMIT 7;
SELECT * FROM items ORDER BY small NULLS FIRST, k LIMIT 4 OFFSET 1;
SELECT k, small FROM items ORDER BY small DESC, k;
SELECT qty FROM items OFFSET 40;
SELECT kind, avg(qty) FROM items GROUP BY kind;
SELECT kind, sum(ratio) FROM items GROUP BY kind;
SELECT price, count(*) FROM items GROUP BY price;
SELECT DISTINCT ratio FROM items;
SELECT name, max(qty) FROM items GROUP BY name HAVING max(qty) > 3;
SELECT count(DISTINCT kind) FROM items;
SELECT kind, min(name) FROM items GROUP BY kind;
SELECT kind, count(*) FROM items GROUP BY kind ORDER BY count(*) DESC LIMIT 2;
SELECT max(qty) + 1, kind FROM items GROUP BY kind;
SELECT kind, count(*), max(qty), 'x' AS tag FROM items GROUP BY kind HAVING count(*) >= 2 AND max(qty) > 1 ORDER BY count(*), kind;
SELECT count(*), sum(qty) FROM items HAVING count(*) > 1000;
SELECT kind, count(*) FROM items GROUP BY kind HAVING 5 < count(*) ORDER BY count(*) DESC, 1;
SELECT kind, max(qty) FROM items GROUP BY kind HAVING max(qty) > 3 LIMIT 2;
SELECT kind, count(*) FROM items WHERE qty > 1 GROUP BY kind HAVING count(*) > 2;
SELECT kind, count(*) FROM items WHERE qty > 4 GROUP BY kind HAVING count(*) > 1;

-- ORDER BY, LIMIT, OFFSET.
SELECT k FROM items ORDER BY k LIMIT 5;
SELECT k FROM items ORDER BY k DESC LIMIT 5;
SELECT k, qty FROM items ORDER BY qty LIMIT 10;
SELECT k, qty FROM items ORDER BY qty NULLS FIRST LIMIT 10;
SELECT k, qty FROM items ORDER BY qty DESC NULLS LAST LIMIT 10;
SELECT k, qty FROM items ORDER BY qty DESC LIMIT 10;
SELECT k, qty FROM items ORDER BY qty, k LIMIT 10;
SELECT k, small, qty FROM items ORDER BY small DESC, qty LIMIT 12;
SELECT * FROM items ORDER BY k LIMIT 3;
SELECT * FROM items ORDER BY 1 DESC LIMIT 3;
SELECT k, big FROM items ORDER BY big LIMIT 4;
SELECT qty AS k FROM items ORDER BY k LIMIT 5;
SELECT qty AS k FROM items ORDER BY items.k LIMIT 5;
SELECT qty AS k FROM items i ORDER BY i.k LIMIT 5;
SELECT k AS qty, qty AS k FROM items ORDER BY k LIMIT 6;
SELECT k AS qty, qty AS k FROM items ORDER BY qty LIMIT 6;
SELECT k, k FROM items ORDER BY k LIMIT 3;
SELECT k, qty FROM items ORDER BY 2 LIMIT 5;
SELECT -k AS k FROM items ORDER BY k LIMIT 3;
SELECT k::text AS t FROM items ORDER BY t LIMIT 5;
SELECT k FROM items ORDER BY k::text LIMIT 5;
SELECT name FROM items ORDER BY name LIMIT 5;
SELECT k, name FROM items ORDER BY name, k LIMIT 5;
SELECT k, price FROM items ORDER BY price LIMIT 5;
SELECT k, day FROM items ORDER BY day LIMIT 5;
SELECT k FROM items ORDER BY k;
SELECT k FROM items ORDER BY k LIMIT 0;
SELECT k FROM items ORDER BY k LIMIT 10000;
SELECT k FROM items ORDER BY k LIMIT 20000;
SELECT k FROM items ORDER BY k LIMIT 5 OFFSET 2;
SELECT k FROM items ORDER BY k OFFSET 40;
SELECT k FROM items ORDER BY k FETCH FIRST 3 ROWS ONLY;
SELECT k, qty FROM items ORDER BY qty FETCH FIRST 3 ROWS WITH TIES;
SELECT k FROM items LIMIT 5;
SELECT k FROM items LIMIT 0;
SELECT k FROM items LIMIT 100;
SELECT k FROM items LIMIT ALL;
SELECT k FROM items LIMIT NULL;
SELECT k FROM items OFFSET 3;
SELECT k FROM items FETCH FIRST 2 ROWS ONLY;
SELECT k FROM items WHERE qty > 3 LIMIT 4;
SELECT * FROM items LIMIT 2 FOR UPDATE;
SELECT k FROM items ORDER BY k LIMIT 2 + 1;
SELECT k FROM items ORDER BY k LIMIT -1;
SELECT k FROM items ORDER BY k LIMIT 'x';
SELECT k FROM (SELECT k FROM items LIMIT 3) s;
SELECT k FROM items WHERE k IN (SELECT k FROM events LIMIT 2);
SELECT k FROM items ORDER BY k USING < LIMIT 3;
SELECT k, qty FROM items ORDER BY qty + 0 LIMIT 3;
SELECT k FROM items ORDER BY random() LIMIT 0;
SELECT e.k, e.seq FROM events e ORDER BY e.k, e.seq LIMIT 7;
SELECT k, seq FROM events ORDER BY seq DESC, k LIMIT 7;

-- Joins: colocated, with the reference table, and not.
SELECT i.k, e.seq, e.amount FROM items i JOIN events e ON e.k = i.k;
SELECT i.k, e.seq FROM items i JOIN events e USING (k);
SELECT k, seq FROM items JOIN events USING (k) WHERE k = 7;
SELECT i.k, e.seq FROM items i LEFT JOIN events e ON e.k = i.k;
SELECT i.k, e.seq FROM items i LEFT JOIN events e ON e.k = i.k AND e.seq > 1;
SELECT i.k, e.seq FROM events e RIGHT JOIN items i ON i.k = e.k;
SELECT i.k, e.seq FROM items i FULL JOIN events e ON e.k = i.k;
SELECT i.k, e.seq FROM items i, events e WHERE e.k = i.k AND e.amount > 3;
SELECT i.k, e.seq FROM items i JOIN events e ON e.k = i.k WHERE i.k IN (7, 11, 40);
SELECT i.k, e.seq FROM items i JOIN events e ON e.seq = i.k;
SELECT i.k, e.k FROM items i JOIN events e ON e.note = i.name;
SELECT i.k, e.k FROM items i JOIN events e ON e.note = i.name WHERE i.k = 5;
SELECT i.k, e.k FROM items i JOIN events e ON true WHERE i.k = 5 AND e.k = 5;
SELECT i.k, kd.label FROM items i JOIN kinds kd ON kd.code = i.kind;
SELECT i.k, kd.label FROM items i LEFT JOIN kinds kd ON kd.code = i.kind;
SELECT kd.label, i.k FROM kinds kd LEFT JOIN items i ON i.kind = kd.code;
SELECT kd.label, i.k FROM items i RIGHT JOIN kinds kd ON i.kind = kd.code;
SELECT i.k, kd.label FROM items i, kinds kd WHERE kd.code = i.kind AND kd.label = 'one';
SELECT i.k, e.seq, kd.label FROM items i JOIN events e ON e.k = i.k JOIN kinds kd ON kd.code = e.kind;
SELECT * FROM kinds;
SELECT * FROM kinds ORDER BY code;
SELECT label FROM kinds WHERE code IN (SELECT kind FROM items);
SELECT * FROM notes;
SELECT n.id, kd.label FROM notes n JOIN kinds kd ON kd.code = n.id % 3;
SELECT n.id, i.name FROM notes n JOIN items i ON i.k = n.k;
SELECT n.id, i.name FROM notes n JOIN items i ON i.k = n.k WHERE i.k = 5;
SELECT i.k FROM items i WHERE i.k IN (SELECT k FROM notes);
SELECT i.k, x.seq FROM items i, LATERAL (SELECT seq FROM events e WHERE e.k = i.k ORDER BY seq LIMIT 1) x;
SELECT i.k, (SELECT count(*) FROM events e WHERE e.k = i.k) FROM items i;
SELECT i.k, (SELECT max(seq) FROM events e WHERE e.k = i.k) FROM items i;
SELECT i.k FROM items i WHERE EXISTS (SELECT 1 FROM events e WHERE e.k = i.k AND e.seq = 2);
SELECT i.k FROM items i WHERE i.qty = (SELECT max(seq) FROM events e WHERE e.k = i.k);
SELECT i.k FROM items i NATURAL JOIN events e;
SELECT a.k, b.k FROM items a JOIN items b ON b.k = a.k;
SELECT a.k, b.k FROM items a JOIN items b ON b.k = a.k + 1;
SELECT a.k FROM items a WHERE a.qty IN (SELECT b.qty FROM items b WHERE b.k = 5);

-- Subqueries and CTEs.
SELECT * FROM (SELECT k, qty FROM items WHERE qty > 5) s;
SELECT s.k FROM (SELECT k, qty * 2 AS q2 FROM items) s WHERE s.q2 > 10;
WITH big AS (SELECT k FROM items WHERE qty > 5) SELECT * FROM big;
WITH big AS (SELECT k FROM items WHERE qty > 5) SELECT b.k, e.seq FROM big b JOIN events e ON e.k = b.k;
WITH a AS (SELECT k FROM items) SELECT count(*) FROM a JOIN a b ON a.k = b.k;
WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r;
WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT i.k, r.n FROM items i, r WHERE i.k = 5;
WITH x AS MATERIALIZED (SELECT k FROM items WHERE flag) SELECT * FROM x;
SELECT k FROM items WHERE qty = (SELECT 3);
SELECT k FROM items WHERE kind = (SELECT code FROM kinds WHERE label = 'two');
SELECT k FROM items WHERE kind IN (SELECT code FROM kinds WHERE label LIKE 't%');
SELECT k FROM items WHERE name IN (SELECT body FROM notes);
SELECT k, (SELECT label FROM kinds WHERE code = items.kind) FROM items;
SELECT EXISTS (SELECT 1 FROM items WHERE qty = 10);
SELECT (SELECT count(*) FROM items);
SELECT k FROM items WHERE qty > ALL (SELECT seq FROM events WHERE events.k = items.k);

-- Set operations.
SELECT k FROM items UNION SELECT k FROM events;
SELECT k FROM items UNION ALL SELECT k FROM events;
SELECT k FROM items INTERSECT SELECT k FROM events;
SELECT k FROM items EXCEPT SELECT k FROM events;
SELECT k FROM items WHERE k = 5 UNION ALL SELECT k FROM events WHERE k = 5;
SELECT code FROM kinds UNION SELECT id FROM notes;
SELECT k FROM items UNION ALL SELECT k FROM items ORDER BY 1 LIMIT 4;
SELECT name FROM items UNION SELECT label FROM kinds;

-- Window functions.
SELECT k, row_number() OVER (ORDER BY k) FROM items;
SELECT k, rank() OVER (PARTITION BY kind ORDER BY qty) FROM items;
SELECT k, sum(qty) OVER (PARTITION BY k) FROM items;
SELECT k, count(*) OVER () FROM items;
SELECT k, lag(qty) OVER (ORDER BY k) FROM items WHERE k = 5;
SELECT k, seq, sum(amount) OVER (PARTITION BY k ORDER BY seq) FROM events;
SELECT k FROM items WINDOW w AS (ORDER BY k);

-- No table, catalogs, and functions.
SELECT 1;
SELECT 1 + 1 AS two, 'x'::text, NULL::int, true;
SELECT 1 / 0;
SELECT generate_series(1, 3);
SELECT * FROM generate_series(1, 3) g ORDER BY g DESC;
SELECT count(*) FROM pg_class WHERE relname IN ('items', 'events', 'kinds', 'notes');
SELECT relname FROM pg_class WHERE relname = 'items';
SELECT k, pg_typeof(k), pg_typeof(price) FROM items WHERE k = 3;
SELECT to_jsonb(i) - 'at' FROM items i WHERE k < 4;
SELECT row_to_json(i)::jsonb - 'at' FROM items i;
SELECT array_agg(x ORDER BY x) FROM unnest(ARRAY[3, 1, 2]) x;
SELECT k, unnest(tags) FROM items;
SELECT k, jsonb_array_elements_text(jsonb_build_array(k, name)) FROM items;
SELECT k, generate_series(1, qty) FROM items WHERE qty < 3;
SELECT DISTINCT k FROM items WHERE k = 5 OR k = 5;
SELECT 'a' = 'a' COLLATE "C";
SELECT k FROM items i WHERE i.* IS NOT NULL;
SELECT items FROM items WHERE k = 2;
SELECT k, tableoid::regclass FROM items WHERE k < 3;
SELECT k, xmin = xmin FROM items WHERE k < 3;
SELECT k, ctid IS NOT NULL FROM items;
SELECT k FROM ONLY items WHERE qty = 1;
SELECT k FROM items TABLESAMPLE SYSTEM (100) WHERE qty = 1;
TABLE kinds;
TABLE items;
VALUES (1, 'a'), (2, 'b');
SELECT * FROM (VALUES (1), (2)) v(x) JOIN items ON items.k = v.x;
SELECT * FROM items WHERE (k, qty) = (5, 2);
SELECT * FROM items WHERE (k, qty) IN ((5, 2), (40, 6));
SELECT * FROM items WHERE k = 5 FOR SHARE;
SELECT * FROM items WHERE k = 5 FOR UPDATE OF items;

-- More key predicates.
SELECT * FROM items WHERE k = 7 OR k = 7;
SELECT * FROM items WHERE k = 7 AND NOT (k = 7);
SELECT * FROM items WHERE k IN (SELECT 7);
SELECT * FROM items WHERE k = (7);
SELECT * FROM items WHERE k = +7;
SELECT * FROM items WHERE k = - -7;
SELECT * FROM items WHERE k = -7;
SELECT * FROM items WHERE k = 7::bigint::int;
SELECT * FROM items WHERE k::int = 7;
SELECT * FROM items WHERE k = ANY (ARRAY[7, 40]);
SELECT * FROM items WHERE k = 7 AND k IN (7, 40);
SELECT * FROM items WHERE k = $$7$$;
SELECT * FROM items WHERE k = E'7';
SELECT * FROM items WHERE k = U&'7';
SELECT * FROM items WHERE k = 07;
SELECT * FROM items WHERE k = 7.;
SELECT * FROM items WHERE k = 1e1;
SELECT * FROM items WHERE k = 3000000000;
SELECT * FROM items WHERE k = -9223372036854775808;
SELECT * FROM items WHERE k = 9223372036854775808;
SELECT * FROM items WHERE k = '9223372036854775808';
SELECT * FROM items WHERE k IN (7, 9223372036854775808);
SELECT * FROM events WHERE k = 7 AND seq = 2;
SELECT * FROM events WHERE k = 2147483648;
SELECT count(*) FROM items WHERE k IN (1, 2, 3, 40);
SELECT k FROM items WHERE k IN (1, 2, 3, 40) ORDER BY k LIMIT 2;
SELECT k FROM items WHERE k IN (1, 2, 3, 40) LIMIT 2;
SELECT k FROM items WHERE k IN (3, 40, 41) ORDER BY k DESC LIMIT 2;
SELECT * FROM items a, items b WHERE a.k = 5 AND b.k = 5;
SELECT a.k, b.k FROM items a, items b WHERE a.k = 5 AND b.k = 40;
SELECT a.k, b.k FROM items a, items b WHERE a.k = 5 AND b.k = 6;
SELECT * FROM items a JOIN events e ON a.k = e.k WHERE e.k = 7;
SELECT a.k, e.seq FROM items a LEFT JOIN events e ON a.k = e.k AND e.k = 7;
SELECT a.k, e.seq FROM items a LEFT JOIN events e ON e.k = 7;
SELECT a.k, e.seq FROM items a LEFT JOIN events e ON a.k = e.k WHERE a.k = 7 OR e.k = 11;
SELECT a.k, e.seq FROM events e RIGHT JOIN items a ON a.k = e.k AND e.k = 7;
SELECT a.k FROM items a WHERE a.k = 7 AND a.qty IN (SELECT seq FROM events e WHERE e.k = 7);
SELECT a.k FROM items a WHERE a.k = 7 AND a.qty IN (SELECT seq FROM events e WHERE e.k = 11);
WITH x AS (SELECT * FROM items WHERE k = 5) SELECT * FROM x;
WITH x AS (SELECT * FROM items WHERE k = 5) SELECT x.k, items.k FROM x, items WHERE items.k = 6;

-- More counts and ordered merges.
SELECT count(*) AS "Count" FROM items;
SELECT count(*) c1, count(qty) c2 FROM items;
SELECT COUNT(*) FROM items;
SELECT pg_catalog.count(*) FROM items;
SELECT count(ALL qty) FROM items;
SELECT count(*) FROM ONLY items;
SELECT count(*) FROM items FOR UPDATE;
SELECT count(*) FROM (SELECT * FROM items LIMIT 5) s;
SELECT count(*) OVER () FROM items WHERE k = 5;
SELECT count(*) FROM items, kinds;
SELECT count(*) FROM items LEFT JOIN kinds ON kinds.code = items.kind;
SELECT count(*) FROM kinds LEFT JOIN items ON kinds.code = items.kind;
SELECT count(*) FROM kinds WHERE EXISTS (SELECT 1 FROM items WHERE items.kind = kinds.code);
SELECT count(*) FROM kinds;
SELECT count(*) FROM events e WHERE e.amount IS NULL;
SELECT count(e.note) FROM items i JOIN events e USING (k) WHERE i.flag;
SELECT small, k FROM items ORDER BY small NULLS FIRST, k DESC LIMIT 9;
SELECT small FROM items ORDER BY small DESC LIMIT 9;
SELECT k, qty FROM items ORDER BY qty DESC NULLS FIRST LIMIT 3;
SELECT i.* FROM items i ORDER BY qty LIMIT 3;
SELECT items.* FROM items ORDER BY items.qty LIMIT 3;
SELECT *, k FROM items ORDER BY k LIMIT 3;
SELECT k FROM items ORDER BY 1 LIMIT 3 FOR SHARE;
SELECT k AS x FROM items ORDER BY k LIMIT 3;
SELECT k AS x FROM items ORDER BY x LIMIT 3;
SELECT qty, k FROM items ORDER BY qty, 2 DESC LIMIT 11;
SELECT k, big FROM items ORDER BY big DESC LIMIT 2;
SELECT k FROM items i ORDER BY i.k LIMIT 3;
SELECT i.k FROM items i ORDER BY k LIMIT 3;
SELECT k FROM items ORDER BY items.k DESC LIMIT 3;
SELECT qty AS small, small AS qty FROM items ORDER BY small, qty LIMIT 8;
SELECT qty AS small, small AS qty FROM items ORDER BY items.small, items.qty LIMIT 8;
SELECT k, qty FROM items WHERE qty > 3 ORDER BY qty, k LIMIT 5;
SELECT k FROM items ORDER BY k LIMIT 5 FOR UPDATE;

-- The unsharded table, alone or with the reference table.
SELECT body, count(*) FROM notes GROUP BY body ORDER BY body;
SELECT n.body, kd.label FROM notes n LEFT JOIN kinds kd ON kd.code = n.id ORDER BY n.id;
SELECT DISTINCT body FROM notes;
SELECT id, sum(k) OVER (ORDER BY id) FROM notes;
SELECT * FROM notes ORDER BY k DESC LIMIT 3 OFFSET 2;
SELECT * FROM notes WHERE k IN (SELECT code * 5 FROM kinds);
SELECT code, label FROM kinds UNION ALL SELECT id, body FROM notes ORDER BY 1, 2;
SELECT * FROM kinds ORDER BY label NULLS FIRST;
SELECT label, count(*) FROM kinds GROUP BY label;
SELECT kd.code, n.id FROM kinds kd FULL JOIN notes n ON n.id = kd.code;

-- Parameters: bound by the extended protocol, inlined by pgx in the
-- simple one.
SELECT * FROM items WHERE k = $1; -- args: [5]
SELECT * FROM items WHERE k = $1; -- args: [40]
SELECT * FROM items WHERE k = $1; -- args: ["5"]
SELECT * FROM items WHERE k = $1; -- args: [null]
SELECT * FROM items WHERE k = $1; -- args: [3000000000]
SELECT * FROM items WHERE k = $1::int4; -- args: [5]
SELECT * FROM items WHERE k = $1::int2; -- args: [40000]
SELECT * FROM items WHERE k IN ($1, $2); -- args: [5, 40]
SELECT * FROM items WHERE k IN ($1, $2); -- args: [5, null]
SELECT * FROM items WHERE k = $1 AND qty = $2; -- args: [5, 2]
SELECT * FROM items WHERE k = $1::text::bigint; -- args: ["5"]
SELECT k FROM items WHERE name = $1; -- args: ["beta"]
SELECT $1::int + k FROM items WHERE k = 5; -- args: [1]
SELECT * FROM events WHERE k = $1 ORDER BY seq; -- args: [7]
SELECT count(*) FROM items WHERE qty > $1; -- args: [3]
SELECT count(*) FROM items WHERE k = $1; -- args: [7]
SELECT k FROM items LIMIT $1; -- args: [3]
SELECT k FROM items LIMIT $1; -- args: [0]
SELECT k FROM items LIMIT $1; -- args: [null]
SELECT k FROM items LIMIT $1; -- args: [-1]
SELECT k FROM items WHERE qty > $1 LIMIT $2; -- args: [3, 4]
SELECT k FROM items ORDER BY k LIMIT $1; -- args: [3]
SELECT k FROM items ORDER BY k LIMIT 3 OFFSET $1; -- args: [1]
SELECT i.k, e.seq FROM items i JOIN events e ON e.k = i.k WHERE i.k = $1; -- args: [7]
SELECT i.k, e.seq FROM items i JOIN events e ON e.k = i.k WHERE e.k = $1 AND i.k = $2; -- args: [7, 11]

-- A user-defined aggregate (int_total), known only from the catalog.
SELECT int_total(qty) FROM items;
SELECT public.int_total(qty) FROM items;
SELECT int_total(qty) + 1 FROM items;
SELECT int_total(qty) FILTER (WHERE flag) FROM items;
SELECT k, int_total(qty) OVER (ORDER BY k) FROM items;
SELECT kind, int_total(qty) FROM items GROUP BY kind;
SELECT int_total(qty) FROM items WHERE k = 5;
SELECT int_total(qty) FROM items WHERE k IN (5, 40);
SELECT k FROM items WHERE qty < (SELECT int_total(seq) FROM events WHERE events.k = items.k);
SELECT int_total(code) FROM kinds;
SELECT int_total(id) FROM notes;
SELECT count(*) FROM items WHERE qty > (SELECT int_total(1));

-- Ordered merges over negative numbers and int8's extremes, in text and
-- in binary.
SELECT k, small FROM items ORDER BY small, k LIMIT 10;
SELECT small, big FROM items ORDER BY big DESC LIMIT 5;
SELECT big FROM items ORDER BY big LIMIT 3;
SELECT k, big FROM items ORDER BY big NULLS FIRST LIMIT 3;
SELECT small, k FROM items ORDER BY small DESC NULLS LAST, k LIMIT 12;
SELECT k, small FROM items WHERE small < 0 ORDER BY small DESC, k DESC LIMIT 6;
SELECT k FROM items WHERE big < 0 ORDER BY k DESC LIMIT 4;
SELECT count(*) FROM items WHERE big < 0;
SELECT k FROM items WHERE big = 9223372036854775807;
SELECT k FROM items WHERE big = -9223372036854775808;
SELECT k, big + 1 FROM items WHERE k = 47;
SELECT k, -big FROM items WHERE k = 48;
SELECT k, abs(small) FROM items ORDER BY k LIMIT 4;

-- Session settings that change how values are written reach every shard.
SET datestyle = 'SQL, DMY';
SELECT k, day, at FROM items;
SELECT k, day FROM items ORDER BY k LIMIT 5;
SET datestyle TO DEFAULT;
SET timezone = 'Asia/Tokyo';
SELECT k, at, at::date FROM items;
SELECT k FROM items WHERE at::date = DATE '2024-03-02';
RESET timezone;
SET extra_float_digits = 0;
SELECT k, ratio / 3 FROM items;
RESET extra_float_digits;
SET intervalstyle = 'postgres_verbose';
SELECT k, at - TIMESTAMPTZ '2024-03-01 00:00:00+00' FROM items;
SET intervalstyle TO DEFAULT;

-- Writes in a transaction, rolled back (each statement runs twice on each
-- side, once per protocol).
BEGIN;
UPDATE items SET qty = qty + 100 WHERE k = 5;
UPDATE items SET name = upper(name) WHERE qty > 5;
DELETE FROM events WHERE seq = 2;
INSERT INTO events VALUES (5, 9, 1.5, 'new', 1) ON CONFLICT DO NOTHING;
INSERT INTO events VALUES (40, 9, 2.5, 'new', 2), (41, 9, 3.5, 'new', 3) ON CONFLICT DO NOTHING;
SELECT count(*) AS events FROM events;
SELECT k, seq, note FROM events WHERE seq = 9;
SELECT k, qty, name FROM items WHERE qty > 100 OR name <> lower(name);
UPDATE items SET qty = 1 WHERE k = 5 RETURNING k, qty;
UPDATE items SET small = 0 WHERE small IS NULL RETURNING k;
DELETE FROM events WHERE k = 7 RETURNING *;
INSERT INTO notes VALUES (100, 5, 'x') ON CONFLICT DO NOTHING;
SELECT * FROM notes WHERE id = 100;
UPDATE kinds SET label = 'ONE' WHERE code = 1;
SELECT i.k, kd.label FROM items i JOIN kinds kd ON kd.code = i.kind WHERE kd.code = 1;
SELECT count(*) FROM items i JOIN kinds kd ON kd.code = i.kind WHERE kd.label = 'ONE';
ROLLBACK;
SELECT count(*) FROM events WHERE seq = 9;
SELECT k, qty FROM items WHERE k = 5;
SELECT * FROM kinds WHERE code = 1;

-- Settings made by function, and in a transaction.
SELECT set_config('datestyle', 'SQL, DMY', false);
SELECT k, day FROM items WHERE k < 10;
SELECT k, day FROM items WHERE k = 40;
SELECT set_config('datestyle', 'ISO, MDY', false);
BEGIN;
SET LOCAL datestyle = 'German';
SELECT k, day AS german FROM items WHERE k < 10;
SELECT set_config('timezone', 'America/New_York', true);
SELECT k, at FROM items WHERE k < 10;
COMMIT;
SELECT k, day, at FROM items WHERE k < 10;

-- Savepoints, cursors and SQL-level PREPARE.
BEGIN;
SAVEPOINT a;
UPDATE items SET qty = -1 WHERE k < 10;
SELECT k, qty FROM items WHERE qty = -1;
ROLLBACK TO SAVEPOINT a;
SELECT count(*) FROM items WHERE qty = -1;
UPDATE items SET qty = -2 WHERE k = 40;
SAVEPOINT b;
SELECT 1 / 0 AS fails;
ROLLBACK TO b;
SELECT k, qty FROM items WHERE k = 40;
RELEASE SAVEPOINT a;
DECLARE c1 CURSOR FOR SELECT k, name FROM items WHERE k = 5;
FETCH ALL FROM c1;
CLOSE c1;
DECLARE c2 CURSOR FOR SELECT k FROM items ORDER BY k;
FETCH 3 FROM c2;
ROLLBACK;
SELECT k, qty AS after_rollback FROM items WHERE k = 40;
PREPARE p1 AS SELECT * FROM items WHERE k = $1;
EXECUTE p1(5);
DEALLOCATE p1;
PREPARE p2 AS SELECT * FROM kinds WHERE code = $1;
EXECUTE p2(1);
DEALLOCATE p2;

-- Settings seen by SHOW and current_setting after set_config and SET.
SELECT set_config('extra_float_digits', '1', false);
SHOW extra_float_digits;
SELECT current_setting('extra_float_digits');
SELECT k, ratio / 7 AS r7 FROM items;
RESET ALL;
SHOW datestyle;
SELECT k, ratio / 7 AS r7_default FROM items;

-- More shapes the merges and colocation must see through.
SELECT k FROM (SELECT k FROM items) s ORDER BY k LIMIT 3;
SELECT k FROM items WHERE k IN (SELECT k FROM events) ORDER BY k LIMIT 3;
SELECT k FROM items WHERE EXISTS (SELECT 1 FROM events WHERE events.k = items.k ORDER BY seq LIMIT 1) ORDER BY k LIMIT 3;
SELECT count(*) FILTER (WHERE k IN (SELECT k FROM events)) FROM items;
SELECT count(*) FROM items WHERE k IN (SELECT k FROM events WHERE seq > 1);
SELECT count(*) FROM items i WHERE i.k = ANY (SELECT e.k FROM events e);
SELECT count(*) FROM items i WHERE (SELECT count(*) FROM events e WHERE e.k = i.k) > 1;
SELECT k, t FROM items, LATERAL unnest(tags) t WHERE t = 't1';
WITH kk AS (SELECT * FROM kinds) SELECT i.k, kk.label FROM items i JOIN kk ON kk.code = i.kind;
WITH RECURSIVE r AS (SELECT k FROM items WHERE k = 1 UNION ALL SELECT i.k FROM items i JOIN r ON i.k = r.k + 1) SELECT * FROM r;
SELECT k, seq FROM (SELECT k, seq, row_number() OVER (PARTITION BY k ORDER BY seq DESC) AS rn FROM events) x WHERE rn = 1;
SELECT k, seq FROM (SELECT k, seq, row_number() OVER (PARTITION BY k ORDER BY seq DESC) AS rn FROM events WHERE k = 7) x WHERE rn = 1;
SELECT k, count(*) FROM events WHERE k = 7 GROUP BY k;
SELECT k FROM items ORDER BY k COLLATE "C" LIMIT 3;
SELECT k FROM items ORDER BY k NULLS LAST LIMIT 3;
SELECT k, small FROM items ORDER BY small USING > LIMIT 3;

-- More writes in a transaction, rolled back.
BEGIN;
UPDATE items SET name = kinds.label FROM kinds WHERE kinds.code = items.kind;
SELECT k, name FROM items WHERE name IN ('one', 'two');
DELETE FROM items USING events WHERE events.k = items.k AND events.seq = 3;
SELECT count(*) AS left_after_delete FROM items;
INSERT INTO items (k, name) VALUES (100, 'x') ON CONFLICT (k) DO UPDATE SET name = excluded.name RETURNING k, name;
INSERT INTO items (k, name) VALUES (100, 'y') ON CONFLICT (k) DO UPDATE SET name = excluded.name RETURNING k, name;
INSERT INTO events VALUES (40, 10, 1, 'a', 1), (41, 10, 2, 'b', 2), (42, 10, 3, 'c', 3) RETURNING k, seq;
UPDATE events SET amount = amount * 2 WHERE seq = 10 RETURNING k, amount;
SELECT k, seq, amount FROM events WHERE seq = 10;
DELETE FROM events WHERE seq = 10 AND k IN (40, 41);
SELECT count(*) AS tens FROM events WHERE seq = 10;
ROLLBACK;
SELECT count(*) AS items_after_rollback FROM items;
BEGIN;
UPDATE items SET k = k + 1000 WHERE k = 5;
ROLLBACK;
BEGIN;
INSERT INTO notes SELECT 200 + k, k, name FROM items WHERE k < 3;
ROLLBACK;
BEGIN;
INSERT INTO items SELECT k + 1000 FROM items WHERE k < 3;
ROLLBACK;
BEGIN;
UPDATE items SET qty = 0 WHERE k IN (SELECT k FROM events WHERE seq = 3);
SELECT count(*) AS zeroed FROM items WHERE qty = 0;
UPDATE items SET qty = 1 WHERE name IN (SELECT note FROM events);
ROLLBACK;

-- Keys of other types: text, bpchar, uuid, numeric, timestamptz, date.
SELECT * FROM accounts WHERE code = 'acct-7';
SELECT * FROM accounts WHERE code = 'acct-7'::varchar;
SELECT * FROM accounts WHERE code = 'acct-7'::varchar(3);
SELECT * FROM accounts WHERE code = 'acct-7'::bpchar;
SELECT * FROM accounts WHERE code = 'acct-7 ';
SELECT * FROM accounts WHERE code = 'ACCT-7';
SELECT * FROM accounts WHERE code = E'acct-\x37';
SELECT * FROM accounts WHERE code = $$acct-7$$;
SELECT * FROM accounts WHERE code = U&'acct-\0037';
SELECT * FROM accounts WHERE code = 'acct-' || '7';
SELECT * FROM accounts WHERE code IN ('acct-7', 'acct-8', 'nope');
SELECT * FROM accounts WHERE code = 'acct-7' COLLATE "C";
SELECT * FROM accounts WHERE code LIKE 'acct-1%';
SELECT * FROM accounts WHERE code = $1; -- args: ["acct-9"]
SELECT count(*) FROM accounts;
SELECT code FROM accounts ORDER BY code LIMIT 3;
SELECT * FROM pads WHERE tag = 't7';
SELECT * FROM pads WHERE tag = 't7    ';
SELECT * FROM pads WHERE tag = 't7 '::bpchar;
SELECT * FROM pads WHERE tag = 't7 '::text;
SELECT * FROM pads WHERE tag = 't7'::char(6);
SELECT * FROM pads WHERE tag IN ('t7', 't8  ');
SELECT * FROM pads WHERE tag = $1; -- args: ["t7  "]
SELECT tag, length(tag), octet_length(tag) FROM pads WHERE v < 4;
SELECT * FROM devices WHERE id = '00012fd1-1111-4222-8333-000000000001';
SELECT * FROM devices WHERE id = '00012FD1-1111-4222-8333-000000000001';
SELECT * FROM devices WHERE id = '{00012fd1-1111-4222-8333-000000000001}';
SELECT * FROM devices WHERE id = '00012fd111114222833300000000000 1';
SELECT * FROM devices WHERE id = '00012fd1111142228333000000000001';
SELECT * FROM devices WHERE id = '0001-2fd1-1111-4222-8333-0000-0000-0001';
SELECT * FROM devices WHERE id = 'not-a-uuid';
SELECT * FROM devices WHERE id = $1; -- args: ["00025fa2-1111-4222-8333-000000000002"]
SELECT * FROM devices WHERE id = $1::uuid; -- args: ["{00025FA2-1111-4222-8333-000000000002}"]
SELECT * FROM ledger WHERE n = 5.25;
SELECT * FROM ledger WHERE n = 5.250;
SELECT * FROM ledger WHERE n = '5.25';
SELECT * FROM ledger WHERE n = '  5.25  ';
SELECT * FROM ledger WHERE n = 525e-2;
SELECT * FROM ledger WHERE n = 0.525e1;
SELECT * FROM ledger WHERE n = 8;
SELECT * FROM ledger WHERE n = 8.0;
SELECT * FROM ledger WHERE n = '8.00';
SELECT * FROM ledger WHERE n = 8::int;
SELECT * FROM ledger WHERE n = 8.0::float8;
SELECT * FROM ledger WHERE n = -0.0;
SELECT * FROM ledger WHERE n = 'NaN';
SELECT * FROM ledger WHERE n = $1; -- args: ["6.50"]
SELECT * FROM ledger WHERE n = $1; -- args: [12]
SELECT * FROM ledger WHERE n IN (1.25, 2.5, 3.75);
SELECT * FROM moments WHERE at = '2024-03-01 07:30:00+00';
SELECT * FROM moments WHERE at = '2024-03-01 16:30:00+09';
SELECT * FROM moments WHERE at = '2024-03-01 07:30:00';
SELECT * FROM moments WHERE at = '2024-03-01T07:30:00Z';
SELECT * FROM moments WHERE at = 'March 1, 2024 07:30 UTC';
SELECT * FROM moments WHERE at = TIMESTAMPTZ '2024-03-01 07:30:00+00';
SELECT * FROM moments WHERE at = TIMESTAMP '2024-03-01 07:30:00';
SELECT * FROM moments WHERE at = '2024-03-01 07:30:00'::timestamp;
SELECT * FROM moments WHERE at = $1; -- args: ["2024-03-01 14:30:00+00"]
SET timezone = 'Asia/Tokyo';
SELECT * FROM moments WHERE at = '2024-03-01 16:30:00';
SELECT v FROM moments WHERE at = '2024-03-01 16:30:00+09';
SELECT * FROM moments WHERE at = $1; -- args: ["2024-03-01 23:30:00"]
SELECT * FROM moments WHERE at = '2024-03-01 07:30:00 UTC';
RESET timezone;
SELECT * FROM days WHERE day = '2024-01-12';
SELECT * FROM days WHERE day = DATE '2024-01-12';
SELECT * FROM days WHERE day = 'January 12, 2024';
SELECT * FROM days WHERE day = '20240112';
SELECT * FROM days WHERE day = '2024-01-12'::timestamp;
SELECT * FROM days WHERE day = $1; -- args: ["2024-01-23"]
SET datestyle = 'SQL, DMY';
SELECT * FROM days WHERE day = '12/01/2024';
SELECT * FROM days WHERE day = '01/02/2024';
SELECT * FROM days WHERE day = $1; -- args: ["23/01/2024"]
SET datestyle = 'ISO, MDY';
SELECT * FROM days WHERE day = '01/12/2024';
SELECT * FROM days WHERE day = '02/01/2024';
RESET datestyle;

-- Time zone and precision forms of timestamptz keys.
SELECT * FROM moments WHERE at = '2024-03-01 13:00:00+0530';
SELECT * FROM moments WHERE at = '2024-03-01 13:00:00+05:30';
SELECT * FROM moments WHERE at = '2024-03-01 07:30:00-00';
SELECT * FROM moments WHERE at = '2024-03-01 08:30:00+01:00';
SELECT * FROM moments WHERE at = '2024-03-01 16:30:00 +09';
SELECT * FROM moments WHERE at = '2024-03-01 07:30:00.000000+00';
SELECT * FROM moments WHERE at = '2024-03-01 07:29:59.9999996+00';
SELECT * FROM moments WHERE at = '2024-03-01 07:30+00';
SELECT * FROM moments WHERE at = '2024-03-01T07:30:00+00:00';
SELECT * FROM moments WHERE at = '2024-03-01 07:30:00 z';
SELECT * FROM moments WHERE at = '2024-03-01 07:30:00 GMT';
SELECT * FROM moments WHERE at = '2024-03-01 02:30:00 EST';
SELECT * FROM moments WHERE at = '2024-03-01 02:30:00 America/New_York';
SELECT * FROM moments WHERE at = '2024-03-01 07:30:00+00:00:00';
SELECT * FROM moments WHERE at = '2024-03-01 09:30:00 +02';
SELECT * FROM moments WHERE at = '2024-03-01 07:30:00 UTC+0';
SELECT * FROM moments WHERE at = '2024-03-01 04:30:00-03';
SELECT * FROM moments WHERE at = 'epoch';
SELECT * FROM moments WHERE at = 'infinity';
SELECT * FROM moments WHERE at = '2024-03-01 07:30:00 BC+00';
SELECT * FROM moments WHERE at IN ('2024-03-01 07:30:00+00', '2024-03-01 14:30:00+00', '2024-03-01 21:30:00+00');
SELECT * FROM days WHERE day = '2024-01-12 00:00:00';
SELECT * FROM days WHERE day = '2024-01-12+09';
SELECT * FROM days WHERE day = ' 2024-01-12 ';
SELECT * FROM days WHERE day = '02024-01-12';
SELECT * FROM days WHERE day = 'epoch';

-- Query strings of several statements (one Query message in the simple
-- protocol; the extended protocol refuses them, 42601, on both sides).
SELECT 1; SELECT 2;
SELECT k FROM items WHERE k = 5; SELECT k FROM items WHERE k = 40;
SELECT count(*) FROM items; SELECT count(*) FROM events;
SELECT k FROM items WHERE k = 5; SELECT 1 / 0; SELECT k FROM items WHERE k = 40;
SELECT 1; SELECT sum(qty) FROM items;
SET datestyle = 'German'; SELECT k, day FROM items WHERE k < 4; RESET datestyle;
BEGIN; UPDATE items SET qty = 0 WHERE k = 5; SELECT qty FROM items WHERE k = 5; ROLLBACK;
UPDATE items SET qty = 999 WHERE k = 40; SELECT 1 / 0;
SELECT k, qty FROM items WHERE qty = 999;
UPDATE items SET qty = 998 WHERE k = 5; UPDATE items SET qty = 998 WHERE k = 40; SELECT 1 / 0;
SELECT k, qty FROM items WHERE qty = 998;
UPDATE events SET note = 'x' WHERE k = 7; SELECT k FROM items WHERE k = 40 FOR UPDATE; SELECT 1 / 0;
SELECT k, note FROM events WHERE note = 'x';
SET datestyle = 'German'; SELECT k FROM items WHERE k = 40; SELECT 1 / 0;
SELECT current_setting('datestyle') AS after_rolled_back_set;
CREATE TABLE scratch (a int); INSERT INTO items (k) VALUES (500); SELECT 1 / 0;
SELECT * FROM scratch;
SELECT k FROM items WHERE k = 500;
UPDATE items SET qty = qty WHERE k = 5; SELECT count(*) AS n FROM items WHERE k IN (5, 40);
SELECT k FROM items WHERE k = 5; SELECT k FROM items WHERE k = 40 FOR UPDATE; SELECT count(*) AS after_lock FROM kinds;

-- Sequences live on the authoritative shard.
SELECT nextval('seq_one');
SELECT currval('seq_one'), lastval();
SELECT nextval('seq_one') AS from_notes FROM notes WHERE id = 1;
SELECT nextval('seq_many') FROM items;
SELECT k, nextval('seq_many') FROM items WHERE k = 40;
SELECT count(*) FROM items WHERE qty < nextval('seq_many');
SELECT setval('seq_one', 100);
SELECT nextval('seq_one') AS after_setval;

-- Gather and compute (issue #16, router/gather.go): reads the shards
-- cannot answer alone and the engine cannot merge are computed by
-- Postgres over the rows pulled from the shards. Outer joins, joins not
-- on the shard key, across shard groups and with the unsharded table,
-- correlated and uncorrelated subqueries, a CTE referenced twice,
-- windows, set operations, other orders and aggregates, parameters, and
-- reads inside transactions after writes.
SELECT i.k, e.k AS ek, e.seq FROM items i JOIN events e ON e.note = i.name ORDER BY 1, 2, 3;
SELECT count(*) FROM items i JOIN events e ON e.note = i.name;
SELECT i.k, count(e.seq) FROM items i LEFT JOIN events e ON e.note = i.name GROUP BY i.k ORDER BY 1;
SELECT i.name, e.note, e.seq FROM items i RIGHT JOIN events e ON e.note = i.name WHERE e.k < 10;
SELECT i.k, e.k AS ek FROM items i FULL JOIN events e ON e.seq = i.qty WHERE coalesce(i.k, e.k) < 20;
SELECT i.k, e.seq FROM items i LEFT JOIN events e ON e.k = i.qty WHERE e.seq IS NULL ORDER BY i.k;
SELECT i.k, n.body FROM items i JOIN notes n ON n.k = i.k ORDER BY i.k, n.body;
SELECT n.id, i.name FROM notes n LEFT JOIN items i ON i.k = n.k ORDER BY n.id;
SELECT a.code, i.k FROM accounts a JOIN items i ON i.k = a.owner ORDER BY 1, 2;
SELECT p.tag, d.v FROM pads p JOIN devices d ON d.v = p.v ORDER BY 1, 2;
SELECT i.k, kd.label, n.body FROM items i JOIN kinds kd ON kd.code = i.kind LEFT JOIN notes n ON n.k = i.k WHERE i.qty > 1 ORDER BY i.k;
SELECT k, name FROM items i WHERE qty > (SELECT avg(qty) FROM items x WHERE x.kind = i.kind) ORDER BY k;
SELECT k FROM items WHERE qty > (SELECT avg(qty) FROM items) ORDER BY k;
SELECT k FROM items WHERE name IN (SELECT note FROM events WHERE amount > 0) ORDER BY k;
SELECT k FROM items i WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.note = i.name) ORDER BY k;
SELECT k, (SELECT max(seq) FROM events e WHERE e.kind = i.kind) AS m FROM items i ORDER BY k;
WITH big AS (SELECT k, qty FROM items WHERE qty > 2) SELECT a.k, b.k AS bk FROM big a JOIN big b ON a.qty = b.qty AND a.k < b.k ORDER BY 1, 2;
WITH t AS (SELECT kind, count(*) AS n FROM items GROUP BY kind) SELECT kind, n FROM t WHERE n > (SELECT min(n) FROM t) ORDER BY kind;
SELECT k, qty, rank() OVER (ORDER BY qty) FROM items ORDER BY k;
SELECT k, sum(qty) OVER (PARTITION BY kind ORDER BY k) FROM items ORDER BY k;
SELECT k, row_number() OVER (ORDER BY k), lag(k) OVER (ORDER BY k) FROM items ORDER BY k;
SELECT kind, avg(price), count(DISTINCT name), stddev(ratio) FROM items GROUP BY kind ORDER BY kind;
SELECT name, count(*) FROM items GROUP BY name ORDER BY name;
SELECT name FROM items UNION SELECT note FROM events ORDER BY 1;
SELECT k FROM items INTERSECT SELECT k FROM events ORDER BY 1;
SELECT k FROM items EXCEPT ALL SELECT k FROM events;
SELECT k, day, price FROM items ORDER BY day DESC NULLS LAST, price, k LIMIT 7;
SELECT k, name FROM items ORDER BY name, k OFFSET 3 LIMIT 5;
SELECT string_agg(name, ',' ORDER BY k) FROM items WHERE k < 10;
SELECT array_agg(k ORDER BY k) FILTER (WHERE flag) FROM items;
SELECT i.k, e.seq FROM items i JOIN events e ON e.note = i.name WHERE i.qty > $1 ORDER BY 1, 2; -- args: [2]
SELECT count(*) FROM items i JOIN notes n ON n.body = i.name WHERE i.k < 1000;
SELECT k, ratio, at FROM items WHERE ratio IS NOT NULL ORDER BY ratio, k;
SELECT i.name, count(*) FROM items i JOIN events e ON e.kind = i.kind GROUP BY i.name HAVING count(*) > 2 ORDER BY 1;
SELECT k, json_agg(k) OVER (ORDER BY k) FROM items WHERE k < 5 ORDER BY k;
SELECT json_agg(k) FROM items;
BEGIN;
INSERT INTO items (k, qty, name, kind) VALUES (901, 5, 'gathered', 1), (902, 6, 'gathered', 2);
INSERT INTO notes VALUES (901, 901, 'n901');
SELECT i.k, n.body FROM items i JOIN notes n ON n.k = i.k WHERE i.k > 900 ORDER BY i.k;
SELECT i.k, e.seq FROM items i LEFT JOIN events e ON e.note = i.name WHERE i.name = 'gathered' ORDER BY i.k;
SELECT k, rank() OVER (ORDER BY qty DESC) FROM items WHERE k > 900 ORDER BY k;
UPDATE events SET note = 'gathered' WHERE k = 5;
SELECT count(*) AS after_update FROM items i JOIN events e ON e.note = i.name;
ROLLBACK;
SELECT count(*) AS after_gather_rollback FROM items WHERE k > 900;
SET datestyle = 'SQL, DMY';
SET extra_float_digits = 0;
SELECT i.k, i.day, i.ratio, e.seq FROM items i JOIN events e ON e.note = i.name ORDER BY 1, 4;
RESET datestyle;
RESET extra_float_digits;
BEGIN;
SET LOCAL datestyle = 'German';
SAVEPOINT g1;
SET LOCAL timezone = 'Asia/Tokyo';
SELECT i.k, i.day, i.at, n.body FROM items i JOIN notes n ON n.k = i.k ORDER BY i.k, n.body;
ROLLBACK TO SAVEPOINT g1;
SELECT i.k, i.day, i.at AS at_after_rollback_to FROM items i JOIN notes n ON n.k = i.k ORDER BY i.k, n.body;
ROLLBACK;
SELECT count(*) FROM items i JOIN events e ON e.note = i.name WHERE i.at < now();
-- Engine: hidden columns (issue #16; the SQL each shard runs carries
-- partial aggregates, group and sort keys the statement does not show).
-- avg as sum and count, with numeric_div's scale.
SELECT avg(qty), avg(small), avg(big), avg(price) FROM items;
SELECT kind, avg(small), avg(qty), avg(big), avg(price) FROM items GROUP BY kind;
SELECT avg(qty) FROM items WHERE k < 0;
SELECT kind, avg(qty) FROM items WHERE qty IS NULL GROUP BY kind;
SELECT avg(small) FILTER (WHERE small < 0), avg(small) FILTER (WHERE small > 100) FROM items;
SELECT kind, avg(amount), count(amount) FROM events GROUP BY kind;
SELECT avg(n), avg(v) FROM ledger;
SELECT v % 3 AS r, avg(n) FROM ledger GROUP BY v % 3;
SELECT avg(big) FROM items WHERE k > 40;
SELECT flag, avg(qty) AS a FROM items GROUP BY flag HAVING count(*) > 3 ORDER BY a DESC NULLS FIRST;
SELECT kind, avg(price) FROM items GROUP BY kind ORDER BY 2 DESC NULLS LAST LIMIT 2;
BEGIN; INSERT INTO ledger VALUES (0.000000000000000000000001234, 1), (-99999999999999999999.5, 2), (7.123456789012345678901234567890, 3); SELECT avg(n), sum(n), avg(v) FROM ledger; SELECT avg(n) FROM ledger WHERE n < 1; ROLLBACK;
BEGIN; INSERT INTO ledger VALUES ('NaN', 1); SELECT avg(n) FROM ledger; ROLLBACK;
BEGIN; INSERT INTO ledger VALUES ('Infinity', 1); SELECT avg(n) FROM ledger; ROLLBACK;
BEGIN; INSERT INTO items (k, qty) VALUES (1001, -7), (1002, -8); SELECT avg(qty) FROM items WHERE k > 1000; SELECT avg(qty) FROM items WHERE qty < 0; ROLLBACK;
-- count(DISTINCT x) and sum(DISTINCT x) as a GROUP BY on x.
SELECT kind, count(DISTINCT name) FROM items GROUP BY kind;
SELECT count(DISTINCT qty), count(*), sum(qty), avg(qty) FROM items;
SELECT sum(DISTINCT qty), count(DISTINCT qty) FROM items;
SELECT sum(DISTINCT qty), sum(DISTINCT small) FROM items;
SELECT sum(DISTINCT big), count(DISTINCT big) FROM items;
SELECT count(DISTINCT k) FROM events;
SELECT count(DISTINCT uid), count(DISTINCT day) FILTER (WHERE flag) FROM items;
SELECT count(DISTINCT name) FROM items WHERE k < 0;
SELECT kind, count(DISTINCT note) FROM events GROUP BY kind HAVING count(DISTINCT note) > 1 ORDER BY kind;
SELECT flag, count(DISTINCT kind) FROM items GROUP BY flag ORDER BY 2 DESC, 1;
SELECT count(DISTINCT name) FROM items GROUP BY kind ORDER BY kind;
SELECT kind, count(DISTINCT qty) AS n FROM items GROUP BY kind ORDER BY n, kind LIMIT 2 OFFSET 1;
SELECT count(DISTINCT ratio) FROM items;
SELECT count(DISTINCT price) FROM items;
-- Group keys the statement does not show.
SELECT count(*) FROM items GROUP BY kind;
SELECT sum(qty) FROM items GROUP BY flag, kind ORDER BY 1;
SELECT count(*) FROM items GROUP BY kind ORDER BY kind;
SELECT count(*), max(qty) FROM items GROUP BY day HAVING count(*) > 1;
SELECT 'x' AS tag, count(*) FROM items GROUP BY uid LIMIT 3;
-- Sort keys the statement does not show, with LIMIT n + offset on each shard.
SELECT name FROM items ORDER BY k LIMIT 5;
SELECT name, k FROM items ORDER BY qty DESC NULLS LAST, k LIMIT 5 OFFSET 2;
SELECT k FROM items ORDER BY big LIMIT 4;
SELECT name, flag FROM items ORDER BY price DESC, k OFFSET 40;
SELECT name FROM items ORDER BY items.small NULLS FIRST, k DESC LIMIT 6;
SELECT name FROM items i ORDER BY i.k DESC LIMIT 3;
SELECT k, name FROM items WHERE qty > $1 ORDER BY small, k LIMIT 3; -- args: [2]
SELECT name FROM items WHERE kind = $1 ORDER BY k OFFSET 5; -- args: [1]
SELECT name FROM items ORDER BY price, k;
SELECT kind, count(*) FROM items GROUP BY kind ORDER BY sum(qty) DESC, kind;
SELECT kind FROM items GROUP BY kind ORDER BY avg(qty), kind;
SELECT flag FROM items GROUP BY flag ORDER BY max(big) DESC LIMIT 1;
SELECT kind, count(*) FROM items GROUP BY kind ORDER BY count(DISTINCT name), kind;
SELECT k, price FROM items ORDER BY price DESC NULLS LAST, k LIMIT 6;
SELECT n, v FROM ledger ORDER BY n DESC LIMIT 5;
-- Text under the C collation (the database's) orders by its bytes; min and max of text.
SELECT k, name FROM items ORDER BY name DESC NULLS LAST, k OFFSET 40;
SELECT min(name), max(name) FROM items;
SELECT kind, min(note), max(note) FROM events GROUP BY kind;
SELECT min(name) FROM items WHERE k < 0;
SELECT DISTINCT name FROM items ORDER BY name DESC NULLS LAST;
SELECT note, code FROM accounts ORDER BY note NULLS FIRST, code;
SELECT min(note), max(code) FROM accounts;
SELECT k FROM items ORDER BY name, k LIMIT 7;
SELECT kind FROM items GROUP BY kind ORDER BY max(name), kind;
SELECT name FROM items ORDER BY name COLLATE "POSIX" LIMIT 3;
SELECT 'x' AS tag, count(DISTINCT name) FROM items WHERE k < 0;
SELECT 1 AS one FROM items HAVING count(*) > 1;
SELECT 1 AS one FROM items HAVING count(*) > 1000;
BEGIN; INSERT INTO ledger VALUES (0.000000000000000000000001234, 1), (0.0000000000000000000000000000001, 2); SELECT avg(n) FROM ledger WHERE n < 0.001; ROLLBACK;
BEGIN; INSERT INTO items (k, big) VALUES (2001, -9223372036854775808), (2002, -9223372036854775808), (2003, 1), (2004, 2); SELECT avg(big) FROM items WHERE k IN (2001, 2002); SELECT avg(big), avg(k) FROM items WHERE k > 2002; ROLLBACK;
SELECT kind, count(DISTINCT kind), count(DISTINCT k) FROM items GROUP BY kind;
SELECT count(DISTINCT name) FILTER (WHERE qty > 3), count(DISTINCT name) FROM items;
SELECT name FROM items ORDER BY flag, k DESC LIMIT 4;
SELECT DISTINCT name FROM items ORDER BY name LIMIT 3 OFFSET 1;
SELECT max(name) FROM items GROUP BY kind HAVING count(*) > 2 ORDER BY 1 DESC;
SELECT kind, avg(qty) FROM items WHERE qty > $1 GROUP BY kind; -- args: [2]
SELECT count(DISTINCT name) FROM items WHERE qty > $1; -- args: [1]
SELECT kind, avg(price) AS a FROM items GROUP BY kind ORDER BY a DESC, kind LIMIT 3;
SELECT k, uid FROM items ORDER BY uid LIMIT 3;
-- s4 block (issue #16: types): labels (colocated with items on k) holds
-- text under the C collation and two ICU ones, bpchar, an enum, arrays
-- and citext. Orders, groups and extremes of these must be Postgres's
-- (or refused), never a Go comparison of bytes under ICU.
SELECT * FROM labels WHERE k = 3;
SELECT k, c, icu, sv FROM labels WHERE k IN (1, 2, 40);
SELECT k, c FROM labels ORDER BY c, k;
SELECT k, c FROM labels ORDER BY c DESC NULLS LAST, k LIMIT 7;
SELECT c FROM labels ORDER BY c LIMIT 5 OFFSET 2;
SELECT k, icu FROM labels ORDER BY icu, k;
SELECT icu FROM labels ORDER BY icu DESC LIMIT 6;
SELECT k, sv FROM labels ORDER BY sv, k;
SELECT k, c FROM labels ORDER BY c COLLATE "en-x-icu", k;
SELECT k, icu FROM labels ORDER BY icu COLLATE "C", k;
SELECT k FROM labels WHERE icu < 'b';
SELECT k FROM labels WHERE c < 'b';
SELECT k FROM labels WHERE sv > 'z';
SELECT min(c), max(c) FROM labels;
SELECT min(icu), max(icu) FROM labels;
SELECT min(sv), max(sv) FROM labels;
SELECT DISTINCT c FROM labels;
SELECT DISTINCT icu FROM labels;
SELECT DISTINCT icu FROM labels ORDER BY icu;
SELECT c, count(*) FROM labels GROUP BY c;
SELECT icu, count(*) FROM labels GROUP BY icu ORDER BY icu;
SELECT sv, count(*) FROM labels GROUP BY sv ORDER BY 2 DESC, 1;
SELECT count(DISTINCT icu), count(DISTINCT c) FROM labels;
SELECT string_agg(c, ',' ORDER BY c) FROM labels;
SELECT string_agg(icu, ',' ORDER BY icu, k) FROM labels;
SELECT array_agg(sv ORDER BY sv, k) FROM labels;
SELECT k, icu, rank() OVER (ORDER BY icu) FROM labels;
SELECT icu FROM labels UNION SELECT c FROM labels;
SELECT c FROM labels INTERSECT SELECT icu FROM labels;
SELECT k, pad, length(pad), pad = 'ab', octet_length(pad) FROM labels;
SELECT k, pad FROM labels ORDER BY pad, k;
SELECT pad, count(*) FROM labels GROUP BY pad;
SELECT DISTINCT pad FROM labels;
SELECT min(pad), max(pad) FROM labels;
SELECT k FROM labels WHERE pad = 'ab';
SELECT k, mood FROM labels ORDER BY mood, k;
SELECT mood, count(*) FROM labels GROUP BY mood;
SELECT mood, count(*) FROM labels GROUP BY mood ORDER BY mood DESC;
SELECT DISTINCT mood FROM labels;
SELECT min(mood), max(mood) FROM labels;
SELECT k FROM labels WHERE mood > 'sad';
SELECT k, mood::text FROM labels WHERE mood = 'ok' ORDER BY k;
SELECT k, nums, words FROM labels;
SELECT k, nums FROM labels ORDER BY nums, k;
SELECT nums, count(*) FROM labels GROUP BY nums;
SELECT DISTINCT words FROM labels;
SELECT max(nums), min(words) FROM labels;
SELECT k FROM labels WHERE nums @> '{1}';
SELECT k, words[1] FROM labels WHERE cardinality(words) = 2 ORDER BY k;
-- Off the search path, ci compares as text (citext's cast to text).
SELECT k, ci FROM labels WHERE ci = 'hello' ORDER BY k;
SELECT min(ci) FROM labels;
SET search_path = public, ext;
SELECT k, ci FROM labels WHERE ci = 'hello';
SELECT k, ci FROM labels ORDER BY ci, k;
SELECT ci, count(*) FROM labels GROUP BY ci;
SELECT DISTINCT ci FROM labels;
SELECT min(ci), max(ci), count(DISTINCT ci) FROM labels;
SELECT min(qty), max(ci) FROM items, labels WHERE items.k = labels.k;
RESET search_path;
SELECT i.k, l.icu FROM items i JOIN labels l ON l.k = i.k WHERE i.k < 10;
SELECT l.icu, count(*) FROM items i JOIN labels l ON l.k = i.k GROUP BY l.icu;
SELECT count(*) FROM labels l JOIN items i ON i.name = l.icu;
-- end of s4 block (types)
-- Batched lookups (router/gather_lookup.go): a gathered table sharded by
-- the key another table's column equals is pulled only from the shards
-- owning that column's values, by an array of them. Integer keys from
-- int2, int4 and int8 columns, text keys, NULLs and values no row has,
-- no value at all, outer joins with the looked-up table nullable (and
-- preserved: no lookup), the join in WHERE, an anti-join, and
-- aggregates over the join.
SELECT i.k, e.k AS ek, e.seq FROM events e JOIN items i ON i.k = e.kind ORDER BY 1, 2, 3;
SELECT e.k, e.seq, i.name FROM events e LEFT JOIN items i ON i.k = e.kind ORDER BY 1, 2;
SELECT e.k, e.seq, i.name FROM items i RIGHT JOIN events e ON i.k = e.kind ORDER BY 1, 2;
SELECT i.k, x.k AS xk FROM items i JOIN items x ON x.k = i.small ORDER BY 1, 2;
SELECT i.k, x.k AS xk FROM items i LEFT JOIN items x ON x.k = i.qty WHERE x.k IS NULL ORDER BY 1;
SELECT n.id, i.k, i.qty FROM notes n, items i WHERE i.k = n.k AND n.id > 1 ORDER BY 1, 2;
SELECT n.id, i.k FROM notes n JOIN items i ON i.k = n.k AND i.qty > 2 WHERE n.body IS NOT NULL ORDER BY 1, 2;
SELECT count(*), sum(i.qty) FROM notes n JOIN items i ON n.k = i.k;
SELECT n.id, a.code FROM notes n JOIN accounts a ON a.code = n.body ORDER BY 1, 2;
SELECT i.k, a.code, a.owner FROM items i JOIN accounts a ON a.code = i.name ORDER BY 1, 2;
SELECT i.k, a.code FROM items i LEFT JOIN accounts a ON a.code = i.name WHERE i.k < 20 ORDER BY 1, 2;
SELECT a.code, i.k FROM accounts a JOIN items i ON i.k = a.owner WHERE a.owner > 5 ORDER BY 1, 2;
SELECT i.k FROM notes n JOIN items i ON i.k = n.k WHERE n.id < 0;
SELECT i.k, e.seq FROM items i JOIN events e ON e.k = i.big ORDER BY 1, 2;
SELECT i.kind, count(x.k) FROM items i LEFT JOIN items x ON x.k = i.kind GROUP BY i.kind ORDER BY 1;
SELECT i.k, x.k AS xk FROM items i FULL JOIN items x ON x.k = i.qty WHERE coalesce(i.k, x.k) < 30 ORDER BY 1, 2;
SELECT n.id, i.k FROM items i LEFT JOIN notes n ON i.k = n.k ORDER BY 1, 2;
SELECT e.k, e.seq FROM events e WHERE EXISTS (SELECT 1 FROM items i WHERE i.k = e.kind) ORDER BY 1, 2;
-- Merges over joins the shards answer whole (planner/mergescope.go):
-- items with events or labels colocated on k, with the reference table
-- kinds; each shard joins its own rows and the router merges them as one
-- table's: GROUP BY, aggregates (count, sum, avg, min, max, count
-- DISTINCT), HAVING, ORDER BY with hidden keys, LIMIT and OFFSET, outer
-- joins, and names two tables share (k, kind), which go to gathering.
SELECT i.kind, count(*), sum(e.seq), min(e.seq), max(i.qty) FROM items i JOIN events e ON e.k = i.k GROUP BY i.kind ORDER BY i.kind;
SELECT i.kind, count(e.seq), avg(i.qty) FROM items i LEFT JOIN events e ON e.k = i.k GROUP BY i.kind ORDER BY 1;
SELECT i.name, count(*) AS n FROM items i JOIN events e ON e.k = i.k GROUP BY i.name HAVING count(*) > 1 ORDER BY n DESC, i.name LIMIT 5;
SELECT e.seq, count(DISTINCT i.qty) FROM items i JOIN events e ON e.k = i.k GROUP BY e.seq ORDER BY e.seq;
SELECT i.k, e.seq FROM items i JOIN events e ON e.k = i.k ORDER BY i.k DESC, e.seq LIMIT 7;
SELECT i.k, e.seq FROM items i JOIN events e ON e.k = i.k ORDER BY i.k, e.seq LIMIT 5 OFFSET 3;
SELECT e.note FROM items i JOIN events e ON e.k = i.k ORDER BY i.qty, e.seq, i.k LIMIT 6;
SELECT count(*), sum(i.qty), avg(e.seq), max(i.big) FROM items i JOIN events e ON e.k = i.k WHERE i.qty > 1;
SELECT DISTINCT e.seq FROM items i JOIN events e ON e.k = i.k ORDER BY 1;
SELECT kd.label, count(*), sum(i.qty) FROM items i JOIN kinds kd ON kd.code = i.kind GROUP BY kd.label ORDER BY kd.label;
SELECT kd.code, count(i.k) FROM items i RIGHT JOIN kinds kd ON kd.code = i.kind GROUP BY kd.code ORDER BY kd.code;
SELECT i.flag, bool_and(e.seq > 1), count(*) FROM items i JOIN events e ON e.k = i.k GROUP BY i.flag;
SELECT l.c, count(*), min(i.name) FROM items i JOIN labels l ON l.k = i.k GROUP BY l.c ORDER BY l.c;
SELECT i.k, i.kind, e.kind FROM items i JOIN events e ON e.k = i.k ORDER BY i.k, e.seq LIMIT 4;
SELECT i.kind, count(*) FROM items i JOIN events e ON e.k = i.k GROUP BY i.kind, e.kind ORDER BY 1, 2;
SELECT i.k, count(*) FROM items i JOIN events e ON e.k = i.k GROUP BY i.k ORDER BY e.k LIMIT 3;
SELECT sum(e.amount), count(DISTINCT e.seq) FROM items i FULL JOIN events e ON e.k = i.k;
SELECT i.qty, count(*) FROM items i JOIN events e ON e.k = i.k JOIN kinds kd ON kd.code = i.kind GROUP BY i.qty HAVING sum(e.seq) >= 2 ORDER BY i.qty;
