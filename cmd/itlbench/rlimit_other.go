//go:build !(linux || darwin)

package main

// raiseFileLimit does nothing where the limit is not a setrlimit one.
func raiseFileLimit(uint64) (string, error) { return "", nil }
