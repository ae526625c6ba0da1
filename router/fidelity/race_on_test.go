//go:build race

package fidelity_test

// raceDetector: the test binary runs under the race detector, which makes
// the in-process router about twelve times slower at splitting INSERTs.
const raceDetector = true
