// Package testenv is how itlproxy's tests meet the machine they run on. A
// test that needs a part the machine lacks (a program, /proc, root) skips,
// loudly: on stderr, where `go test` without -v still shows it, and in the
// skip message, each saying what is missing and how to install it. Under
// CI=true it fails instead: CI installs every part, so a skip there would
// be a test that silently never ran.
package testenv
