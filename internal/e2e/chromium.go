package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/itlproxy/itlproxy/internal/testenv"
)

// InstallChromium says how to get the browser the page tests render in.
const InstallChromium = "sudo apt-get install -y chromium"

// Render loads url (a page, or a file:// one) in headless Chromium, as a
// reader would, and returns the DOM it rendered; it also saves what the
// page looks like, width pixels wide, as the PNG named shot among the test
// artifacts ($ITLPROXY_TEST_ARTIFACTS when set, which CI keeps, else a
// temporary directory), and returns its path.
func Render(t testing.TB, url, shot string, width, height int) (dom, png string) {
	t.Helper()
	bin := testenv.LookPath(t, "chromium", InstallChromium)
	dir := os.Getenv("ITLPROXY_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	png = filepath.Join(dir, shot)
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir()}
	run := func(args ...string) string {
		t.Helper()
		var stderr strings.Builder
		cmd := exec.Command(bin, append(base, args...)...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return string(out)
	}
	dom = run("--dump-dom", url)
	run("--hide-scrollbars", "--window-size="+strconv.Itoa(width)+","+strconv.Itoa(height), "--screenshot="+png, url)
	if fi, err := os.Stat(png); err != nil || fi.Size() == 0 {
		t.Fatalf("chromium wrote no screenshot at %s: %v", png, err)
	}
	t.Logf("screenshot: %s", png)
	return dom, png
}
