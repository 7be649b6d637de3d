package image_test

import (
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/prometheus/procfs"

	"github.com/itlproxy/itlproxy/internal/e2e"
	"github.com/itlproxy/itlproxy/internal/testenv"
)

// The build arguments the tests pass, as `docker build --build-arg` would.
const (
	testVersion  = "v9.8.7-image-test"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
)

// TestDockerfileBuild runs the build stage's `go build` as written, in the
// build context, and checks the binary: statically linked, stamped with the
// build arguments, listening by default on the ports EXPOSE declares, and
// runnable as the image's user in a read-only directory.
func TestDockerfileBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("-short leaves out building the image's binary; run without -short to include it")
	}
	goTool := testenv.Go(t)
	stages, global := readDockerfile(t)
	build := findGoBuild(t, stages, global, map[string]string{
		"VERSION":    testVersion,
		"REVISION":   testRevision,
		"TARGETOS":   runtime.GOOS,
		"TARGETARCH": runtime.GOARCH,
	})
	copiesAll := func(c *instructions.CopyCommand) bool {
		return slices.Equal(c.SourcePaths, []string{"."}) && c.DestPath == "." && c.From == ""
	}
	if !slices.ContainsFunc(commands[*instructions.CopyCommand](build.stage), copiesAll) {
		t.Fatal("the build stage does not `COPY . .`: this test builds in the whole context, as that copies it")
	}
	buildContext := t.TempDir()
	copyContext(t, repo, buildContext)

	// A directory the image's user can read and run from, but not write.
	dir, err := os.MkdirTemp("", "itlproxy-image-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "itlproxy")
	args := slices.Clone(build.args)
	args[slices.Index(args, "-o")+1] = bin
	cmd := exec.Command(goTool, args...)
	cmd.Dir = buildContext
	// One package at a time: other tests of the suite may be timing
	// streams on this machine's few cores meanwhile.
	cmd.Env = append(append(os.Environ(), "GOFLAGS=-p=1"), build.env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", strings.Join(build.env, " "), strings.Join(cmd.Args, " "), err, out)
	}

	checkStatic(t, bin)
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("build settings %v: want CGO_ENABLED=0 and -trimpath", settings)
	}
	checkExposed(t, bin, stages[len(stages)-1])
	t.Run("runs as the image's user", func(t *testing.T) { runAsImageUser(t, dir, bin) })
}

// checkExposed wants the final stage to EXPOSE the binary's default proxy
// and admin ports, as `itlproxy -h` states them.
func checkExposed(t *testing.T, bin string, final instructions.Stage) {
	t.Helper()
	help, err := exec.Command(bin, "-h").Output()
	if err != nil {
		t.Fatalf("itlproxy -h: %v", err)
	}
	var want []string
	for _, name := range []string{"ITLPROXY_LISTEN_ADDR", "ITLPROXY_ADMIN_ADDR"} {
		m := regexp.MustCompile(`(?m)^\s*` + name + ` \(default ([^)]*)\)`).FindSubmatch(help)
		if m == nil {
			t.Fatalf("itlproxy -h states no default for %s:\n%s", name, help)
		}
		_, port, err := net.SplitHostPort(string(m[1]))
		if err != nil {
			t.Fatalf("%s default %s: %v", name, m[1], err)
		}
		want = append(want, port)
	}
	var exposed []string
	for _, e := range commands[*instructions.ExposeCommand](final) {
		exposed = append(exposed, e.Ports...)
	}
	if !slices.Equal(exposed, want) {
		t.Errorf("EXPOSE %v: want the default proxy and admin ports %v", exposed, want)
	}
}

// runAsImageUser runs bin, in dir, as the image's user with nothing it can
// write: `version` prints the build arguments, and `demo` serves, exports
// them in itlproxy_build_info, and exits cleanly on SIGTERM.
func runAsImageUser(t *testing.T, dir, bin string) {
	testenv.Root(t, "running the binary as the image's user")
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o555); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // MkdirTemp made it 0700
		t.Fatal(err)
	}
	asImageUser := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Dir = work
		// Only what the container has: no HOME or TMPDIR that it could
		// write to.
		cmd.Env = []string{"HOME=" + work, "TMPDIR=" + work}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: imageUID, Gid: imageUID}}
		return cmd
	}

	out, err := asImageUser("version").CombinedOutput()
	want := fmt.Sprintf("itlproxy %s (revision %s, %s)\n", testVersion, testRevision, runtime.Version())
	if err != nil || string(out) != want {
		t.Errorf("itlproxy version: %v\n%s\nwant %q", err, out, want)
	}

	cmd := asImageUser("demo")
	cmd.Env = append(cmd.Env, "ITLPROXY_LISTEN_ADDR=127.0.0.1:0", "ITLPROXY_ADMIN_ADDR=127.0.0.1:0", "ITLPROXY_DEMO_CLIENTS=1")
	demo := e2e.Run(t, cmd) // ready: /readyz answered 200
	if uid := processUID(t, cmd.Process.Pid); uid != imageUID {
		t.Errorf("itlproxy runs as uid %d, want %d", uid, imageUID)
	}
	metrics := get(t, "http://"+demo.Admin+"/metrics")
	stamp := fmt.Sprintf(`itlproxy_build_info{goversion=%q,revision=%q,version=%q} 1`, runtime.Version(), testRevision, testVersion)
	if !strings.Contains(metrics, stamp) {
		t.Errorf("/metrics lacks %s", stamp)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-demo.Exited():
		if err := demo.Err(); err != nil {
			t.Errorf("itlproxy demo after SIGTERM: %v\n%s", err, demo.Log())
		}
	case <-time.After(20 * time.Second):
		t.Error("itlproxy demo did not exit within 20s of SIGTERM")
	}
}

// checkStatic wants an executable that needs no dynamic loader and no
// shared library: the final stage has neither.
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a PT_INTERP program header: dynamically linked", bin)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil || len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v (%v)", bin, libs, err)
	}
}

// processUID returns the real user id of a running process.
func processUID(t *testing.T, pid int) uint64 {
	t.Helper()
	p, err := procfs.NewProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	status, err := p.NewStatus()
	if err != nil {
		t.Fatal(err)
	}
	return status.UIDs[0]
}

// get returns the body of a 200 answer to a GET of url.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v\n%s", url, resp.StatusCode, err, body)
	}
	return string(body)
}
