//go:build race

package main

// raceSlowdown is how much slower code runs under the race detector, for
// the tests that hold it to a time budget.
const raceSlowdown = 5
