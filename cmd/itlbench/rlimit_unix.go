//go:build linux || darwin

package main

import (
	"fmt"
	"syscall"
)

// raiseFileLimit makes sure the process may open need files. Go already
// raises the soft limit to the hard one at start; past the hard limit it
// tries to raise both (which root may). raised says what it changed;
// err, that the limit stays too low.
func raiseFileLimit(need uint64) (raised string, err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return "", fmt.Errorf("reading the open-file limit: %v", err)
	}
	if lim.Cur >= need {
		return "", nil
	}
	want := syscall.Rlimit{Cur: need, Max: max(lim.Max, need)}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) == nil {
		return fmt.Sprintf("raised the open-file limit from %d to %d", lim.Cur, need), nil
	}
	want = syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want)
	return "", fmt.Errorf("this concurrency needs about %d open files, but the limit is %d: raise it (ulimit -n) or connections will fail",
		need, want.Cur)
}
