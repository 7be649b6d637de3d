package cmdtest

import (
	"bytes"
	"errors"
	"os"
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

// runMainEnv, set to 1 in a test binary's environment, makes Main run the
// command's main instead of the tests.
const runMainEnv = "CMDTEST_RUN_MAIN"

// Main is a command's TestMain: it runs main when RunMain started the test
// binary, and the tests otherwise.
func Main(m *testing.M, main func()) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// RunMain runs the command's real main in a child process (the test binary,
// whose TestMain is Main) with args and env added to the test's environment,
// and returns what it wrote to stdout and stderr together, and its exit
// status: a check of exit statuses from outside. It fails t if the child
// could not run.
func RunMain(t testing.TB, env []string, args ...string) (output string, status int) {
	t.Helper()
	out, err := MainCommand(env, args...).CombinedOutput()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return string(out), exitErr.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// MainCommand is the command that runs the command's real main in a child
// process (the test binary, whose TestMain is Main) with args and env
// added to the test's environment, not yet started: for a test that
// signals the process while it runs.
func MainCommand(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), runMainEnv+"=1"), env...)
	return cmd
}
