"""psycopg 3 in its default (transactional) mode: after an error inside
its transaction, rollback() brings the connection back, whichever way
psycopg sent the failing statement (issue #19). Prints a transcript for
the Go test to compare with Postgres's."""
import sys

import psycopg

with psycopg.connect(sys.argv[1]) as conn:
    cur = conn.cursor()
    cur.execute("DROP TABLE IF EXISTS notes")
    cur.execute("CREATE TABLE notes (id int PRIMARY KEY)")
    conn.commit()

    def attempt(name, f):
        try:
            f()
        except psycopg.Error as e:
            print(name, "error:", e.sqlstate, conn.info.transaction_status.name)
        conn.rollback()
        print("  after rollback:", conn.info.transaction_status.name)
        cur.execute("SELECT count(*) FROM notes")
        print("  rows:", cur.fetchone())
        conn.commit()

    attempt("plain", lambda: cur.execute("SELECT 1/0"))
    attempt("duplicate", lambda: [cur.execute("INSERT INTO notes VALUES (%s)", (i,)) for i in (1, 2, 1)])
    attempt("undefined table", lambda: cur.execute("SELECT * FROM no_such_table"))
    attempt("syntax", lambda: cur.execute("SELEC 1"))
    attempt("executemany", lambda: cur.executemany("INSERT INTO notes VALUES (%s)", [(1,), (2,), (1,)]))

    def pipeline():
        with conn.pipeline():
            cur.execute("INSERT INTO notes VALUES (%s)", (7,))
            cur.execute("INSERT INTO notes VALUES (%s)", (7,))
    attempt("pipeline", pipeline)

    def transaction():
        with conn.transaction():
            cur.execute("INSERT INTO notes VALUES (%s)", (8,))
            cur.execute("SELECT 1/0")
    attempt("transaction block", transaction)

    def prepared():
        # psycopg prepares a query it has run prepare_threshold (5) times.
        for _ in range(7):
            cur.execute("SELECT 10 / %s", (1,))
        cur.execute("SELECT 10 / %s", (0,))
    attempt("prepared", prepared)

    def server_cursor():
        c = conn.cursor(name="c1")
        c.execute("SELECT 1/0")
        c.fetchall()
    attempt("server cursor", server_cursor)

    def copy():
        with cur.copy("COPY notes FROM STDIN") as cp:
            cp.write_row((20,))
            cp.write_row((20,))
    attempt("copy", copy)
