// Package cmdtest holds what the tests of itlproxy's and itlbench's
// commands share.
package cmdtest

import (
	"bytes"
	"errors"
	"os/exec"
	"sync"
	"testing"
)

// LockedBuffer is an io.Writer safe to read while another goroutine writes
// to it: a command's log, read while the command runs.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ExitStatus runs cmd to its end and returns what it wrote to stdout and
// stderr together, and its exit status. It fails t if cmd could not run.
func ExitStatus(t testing.TB, cmd *exec.Cmd) (output string, status int) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return string(out), exitErr.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}
