package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// Missing skips t, or under CI fails it, because part is missing; install
// says how to get it.
func Missing(t testing.TB, part, install string) {
	t.Helper()
	msg := fmt.Sprintf("%s: %s is MISSING (%s); SKIPPING IT", t.Name(), part, install)
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatal(msg + ": not allowed under CI=true")
	}
	fmt.Fprintln(os.Stderr, "### "+msg)
	t.Skip(msg)
}

// LookPath returns the path of the program name, or calls Missing with
// install when it is not on PATH.
func LookPath(t testing.TB, name, install string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		Missing(t, "the program "+name, install)
	}
	return path
}

// Go returns the path of the go command, for a test that builds a binary.
func Go(t testing.TB) string {
	t.Helper()
	return LookPath(t, "go", "Go 1.26 or later, from https://go.dev/dl/, on PATH")
}

// Root skips t, or under CI fails it, unless it runs as root: a test that
// must run a program as another user needs that.
func Root(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "root ("+why+")", "run the tests as root, as CI does")
	}
}
