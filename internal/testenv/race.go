//go:build race

package testenv

// RaceSlowdown is how much slower code runs under the race detector, for
// the tests that hold it to a time budget.
const RaceSlowdown = 5
