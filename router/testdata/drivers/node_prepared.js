// node-postgres: a named prepared statement, parsed once and bound 50
// times, is in pg_prepared_statements for the session, as on Postgres
// (issue #19). Prints a transcript for the Go test to compare.
const { Client } = require('pg');

async function main() {
  const client = new Client({ connectionString: process.argv[2] });
  await client.connect();
  let sum = 0;
  for (let i = 0; i < 50; i++) {
    const res = await client.query({ name: 'add-one', text: 'SELECT $1::int + 1 AS n', values: [i] });
    sum += res.rows[0].n;
  }
  console.log('sum:', sum);
  const list = async () => {
    const res = await client.query(
      'SELECT name, statement, parameter_types::text[] AS types, from_sql FROM pg_prepared_statements ORDER BY name');
    console.log('prepared:', JSON.stringify(res.rows));
  };
  await list();
  // Still usable after the view was read, and a new one shows up too.
  const res = await client.query({ name: 'add-one', text: 'SELECT $1::int + 1 AS n', values: [41] });
  console.log('again:', res.rows[0].n);
  await client.query({ name: 'add-two', text: 'SELECT $1::int + 2 AS n', values: [40] });
  await client.query('PREPARE by_sql AS SELECT 1');
  await list();
  await client.query('DEALLOCATE ALL');
  await list();
  await client.end();
}

main().catch((e) => { console.log('error:', e.code, e.message); process.exit(1); });
