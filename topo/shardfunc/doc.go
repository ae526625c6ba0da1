// Package shardfunc holds Tessera's sharding functions: how a shard-key value,
// as a Postgres client sends it in text or binary format, becomes a canonical
// byte encoding and then a 64-bit routing key.
//
// A routing key is a point in the 64-bit routing space that shard groups
// divide into key ranges. Three functions map values into that space:
//
//   - xxhash: XXH3-64 (seed 0) of the value's canonical encoding.
//   - modulo: an integer value modulo a configured modulus.
//   - range:  an integer value used as it is.
//
// The canonical encodings are part of Tessera's public contract: another
// program (seed 004's stream-id generator, say) can place rows exactly as the
// router does by hashing the same bytes. They are documented in docs/topology.md
// and pinned by golden vectors in this package's tests.
//
// Integer keys are routed without allocating: this code is on every routed
// query's path.
package shardfunc
