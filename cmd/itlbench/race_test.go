//go:build race

package main

// raceEnabled: binaries the tests build are built with -race too, so that
// they reuse the packages the test binary's build left in the cache.
const raceEnabled = true
