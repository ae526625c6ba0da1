//go:build !race

package fidelity_test

const raceDetector = false
