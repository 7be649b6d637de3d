package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMissing runs a test that lacks a program in a child test binary,
// with CI unset and with CI=true: it must skip, saying so on stderr, and
// fail under CI.
func TestMissing(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "1" {
		LookPath(t, "no-such-program-itlproxy", "it does not exist")
		t.Fatal("LookPath returned for a missing program")
	}
	for _, c := range []struct {
		ci       string
		wantFail bool
	}{{"", false}, {"false", false}, {"true", true}, {"1", true}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissing$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTENV_CHILD=1", "CI="+c.ci)
		out, err := cmd.CombinedOutput()
		text := string(out)
		if failed := err != nil; failed != c.wantFail {
			t.Errorf("CI=%q: failed %v, want %v\n%s", c.ci, failed, c.wantFail, text)
		}
		msg := "TestMissing: the program no-such-program-itlproxy is MISSING (it does not exist); SKIPPING IT"
		if !strings.Contains(text, msg) {
			t.Errorf("CI=%q: the output does not say %q:\n%s", c.ci, msg, text)
		}
		if loud := strings.Contains(text, "### "+msg); loud == c.wantFail {
			t.Errorf("CI=%q: the ### line on stderr is there: %v\n%s", c.ci, loud, text)
		}
		if skipped := strings.Contains(text, "--- SKIP: TestMissing"); skipped == c.wantFail {
			t.Errorf("CI=%q: skipped %v\n%s", c.ci, skipped, text)
		}
	}
}
