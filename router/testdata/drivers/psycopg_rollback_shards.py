"""psycopg 3's rollback() after an error in a transaction whose
statements went to several shards (the store database's customers are
sharded): the connection comes back (issue #19). Prints a transcript for
the Go test to compare with Postgres's."""
import sys

import psycopg

with psycopg.connect(sys.argv[1]) as conn:
    cur = conn.cursor()
    cur.execute("DROP TABLE IF EXISTS psycopg_notes"); cur.execute("CREATE TABLE psycopg_notes (id int primary key)"); conn.commit()
    cur.execute("DELETE FROM customers WHERE customer_id BETWEEN 990000 AND 990100"); conn.commit()
    def attempt(name, f):
        try:
            f()
        except psycopg.Error as e:
            print(name, "error:", e.sqlstate, conn.info.transaction_status.name)
        try:
            conn.rollback()
            print("  after rollback:", conn.info.transaction_status.name)
            cur.execute("SELECT count(*) FROM customers WHERE customer_id BETWEEN 990000 AND 990100")
            print("  select:", cur.fetchone())
            conn.commit()
        except psycopg.Error as e:
            print("  FAIL", type(e).__name__, e)
            try: conn.rollback()
            except psycopg.Error as e: print("  FAIL again", e)
    def em():
        cur.execute("INSERT INTO psycopg_notes VALUES (1)")
        cur.executemany("INSERT INTO customers (customer_id, name) VALUES (%s, 'x')", [(990001,), (990002,), (990003,), (990004,), (990001,)])
    attempt("executemany across shards", em)
    def pl():
        with conn.pipeline():
            cur.execute("INSERT INTO psycopg_notes VALUES (2)")
            for i in (990011, 990012, 990013, 990011):
                cur.execute("INSERT INTO customers (customer_id, name) VALUES (%s, 'x')", (i,))
    attempt("pipeline across shards", pl)
    def pl2():
        with conn.pipeline():
            cur.execute("INSERT INTO customers (customer_id, name) VALUES (%s, 'x')", (990021,))
            cur.execute("INSERT INTO customers (customer_id, name) VALUES (%s, 'x')", (990022,))
            cur.execute("SELECT 1/0")
            cur.execute("INSERT INTO customers (customer_id, name) VALUES (%s, 'x')", (990023,))
    attempt("pipeline error mid", pl2)
    def tx():
        with conn.transaction():
            cur.execute("INSERT INTO customers (customer_id, name) VALUES (%s, 'x')", (990031,))
            cur.execute("INSERT INTO customers (customer_id, name) VALUES (%s, 'x')", (990032,))
            cur.execute("INSERT INTO psycopg_notes VALUES (3)")
            cur.execute("INSERT INTO customers (customer_id, name) VALUES (%s, 'x')", (990031,))
    attempt("tx block across shards", tx)
    def sp():
        cur.execute("INSERT INTO customers (customer_id, name) VALUES (%s, 'x')", (990041,))
        with conn.transaction():
            cur.execute("INSERT INTO customers (customer_id, name) VALUES (%s, 'x')", (990042,))
            cur.execute("INSERT INTO customers (customer_id, name) VALUES (%s, 'x')", (990041,))
    attempt("savepoint across shards", sp)
