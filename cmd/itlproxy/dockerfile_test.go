package main

import (
	"bufio"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// There is no container engine here, so the image is checked through its
// parts: the final stage's settings, and the build stage's `go build`, run
// as the Dockerfile writes it in the context .dockerignore leaves, whose
// binary must be static and must run as the image's user with nothing
// writable.

const repoDir = "../.."

// The build arguments the tests pass, as `docker build --build-arg` would.
const (
	testVersion  = "v9.8.7-image-test"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
)

// imageUID is the user the image runs as: distroless's "nonroot".
const imageUID = 65532

func readDockerfile(t *testing.T) []stage {
	t.Helper()
	stages, _ := readDockerfileArgs(t)
	return stages
}

func readDockerfileArgs(t *testing.T) ([]stage, map[string]string) {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(repoDir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages, global, err := parseDockerfile(string(text))
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a build stage and a final one", len(stages))
	}
	return stages, global
}

// goBuild is the build stage's `go build` command: its environment
// assignments, its arguments after `go`, and where it writes the binary.
type goBuild struct {
	stage  *stage
	env    []string
	args   []string
	output string // the -o value, where the final stage copies from
}

// findGoBuild finds the one RUN that runs `go build` and splits it into
// words as the build stage's shell would, with the stage's ARG and ENV
// values and the build arguments given.
func findGoBuild(t *testing.T, stages []stage, buildArgs map[string]string) goBuild {
	t.Helper()
	var found []goBuild
	for i := range stages {
		s := &stages[i]
		for _, run := range s.runs {
			if !strings.Contains(run, "go build") {
				continue
			}
			words, err := shellWords(stripRunFlags(run), s.lookup(buildArgs))
			if err != nil {
				t.Fatalf("RUN %s: %v", run, err)
			}
			b := goBuild{stage: s}
			for len(words) > 0 && isAssignment(words[0]) {
				b.env, words = append(b.env, words[0]), words[1:]
			}
			if len(words) < 2 || words[0] != "go" || words[1] != "build" {
				t.Fatalf("RUN %s: want `[NAME=value ...] go build ...`", run)
			}
			b.args = words[1:]
			i := slices.Index(b.args, "-o")
			if i < 0 || i+1 >= len(b.args) {
				t.Fatalf("RUN %s: want -o <path>", run)
			}
			b.output = b.args[i+1]
			found = append(found, b)
		}
	}
	if len(found) != 1 {
		t.Fatalf("the Dockerfile has %d RUNs with `go build`, want 1", len(found))
	}
	return found[0]
}

// TestDockerfileSettings checks the Dockerfile's settings: the build
// stage's Go against go.mod's, and the final stage's minimal base, the
// binary the build stage makes, the non-root user, both ports, and an
// entrypoint that needs no arguments.
func TestDockerfileSettings(t *testing.T) {
	stages, global := readDockerfileArgs(t)
	build := findGoBuild(t, stages, map[string]string{"TARGETOS": runtime.GOOS, "TARGETARCH": runtime.GOARCH})
	// The golang images build with GOTOOLCHAIN=local: an older Go than
	// go.mod's would refuse to build.
	goMod, err := os.ReadFile(filepath.Join(repoDir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var goLine string
	for line := range strings.Lines(string(goMod)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "go "); ok {
			goLine = v
		}
	}
	if !strings.Contains(build.stage.from, "golang:${GO_VERSION}") || global["GO_VERSION"] != goLine {
		t.Errorf("build stage FROM %s with GO_VERSION=%s: want golang:${GO_VERSION} and go.mod's Go, %s", build.stage.from, global["GO_VERSION"], goLine)
	}
	final := stages[len(stages)-1]
	if final.from != "scratch" && !strings.HasPrefix(final.from, "gcr.io/distroless/static") {
		t.Errorf("final stage FROM %s: want gcr.io/distroless/static (or scratch with CA certificates)", final.from)
	}
	if build.stage == &stages[len(stages)-1] {
		t.Error("the final stage builds the binary: want a separate build stage")
	}
	var installed string
	for _, c := range final.copies {
		if len(c) == 3 && c[0] == "--from="+build.stage.name && c[1] == build.output {
			installed = c[2]
		}
	}
	if installed == "" {
		t.Errorf("the final stage does not COPY --from=%s %s", build.stage.name, build.output)
	}
	if final.user != fmt.Sprint(imageUID) && final.user != fmt.Sprintf("%d:%d", imageUID, imageUID) {
		t.Errorf("USER %q: want %d (numeric, so that Kubernetes' runAsNonRoot can verify it)", final.user, imageUID)
	}
	var wantPorts []string
	for _, field := range []string{"ListenAddr", "AdminAddr"} {
		f, _ := reflect.TypeFor[config]().FieldByName(field)
		_, port, _ := net.SplitHostPort(f.Tag.Get("envDefault"))
		wantPorts = append(wantPorts, port)
	}
	if !slices.Equal(final.expose, wantPorts) {
		t.Errorf("EXPOSE %v: want the default proxy and admin ports %v", final.expose, wantPorts)
	}
	var entrypoint []string
	if installed == "" {
		return
	}
	if err := json.Unmarshal([]byte(final.entrypoint), &entrypoint); err != nil || !slices.Equal(entrypoint, []string{installed}) {
		t.Errorf("ENTRYPOINT %s: want the exec form [%q] (no shell in the image, no arguments needed)", final.entrypoint, installed)
	}
}

// TestDockerfileBuild runs the build stage's `go build` as written, in the
// build context, and checks the binary: statically linked, stamped with the
// build arguments, and runnable as the image's user in a read-only
// directory.
func TestDockerfileBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("no go on PATH to run the Dockerfile's go build")
	}
	build := findGoBuild(t, readDockerfile(t), map[string]string{
		"VERSION":    testVersion,
		"REVISION":   testRevision,
		"TARGETOS":   runtime.GOOS,
		"TARGETARCH": runtime.GOARCH,
	})
	if !slices.ContainsFunc(build.stage.copies, func(c []string) bool { return slices.Equal(c, []string{".", "."}) }) {
		t.Fatalf("the build stage copies %v: this test builds in the whole context, as `COPY . .` copies it", build.stage.copies)
	}
	buildContext := t.TempDir()
	copyContext(t, repoDir, buildContext)

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

	t.Run("runs as the image's user", func(t *testing.T) {
		needRoot(t)
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
			// Only what the container has: no HOME or TMPDIR that it
			// could write to.
			cmd.Env = []string{"HOME=" + work, "TMPDIR=" + work}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: imageUID, Gid: imageUID}}
			return cmd
		}

		out, err := asImageUser("version").CombinedOutput()
		want := fmt.Sprintf("itlproxy %s (revision %s, %s)\n", testVersion, testRevision, runtime.Version())
		if err != nil || string(out) != want {
			t.Errorf("itlproxy version: %v\n%s\nwant %q", err, out, want)
		}

		demo := asImageUser("demo")
		demo.Env = append(demo.Env, "ITLPROXY_LISTEN_ADDR=127.0.0.1:0", "ITLPROXY_ADMIN_ADDR=127.0.0.1:0", "ITLPROXY_DEMO_CLIENTS=1")
		stderr, err := demo.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := demo.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		admin := make(chan string, 1)
		log := &lockedBuffer{}
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				fmt.Fprintln(log, sc.Text())
				if _, a := startedAddrs(sc.Text()); a != "" {
					admin <- a
				}
			}
			exited <- demo.Wait()
		}()
		defer demo.Process.Kill()
		var adminAddr string
		select {
		case adminAddr = <-admin:
		case err := <-exited:
			t.Fatalf("itlproxy demo exited: %v\n%s", err, log.String())
		case <-time.After(30 * time.Second):
			t.Fatal("itlproxy demo did not start within 30s")
		}

		if uid := processUID(t, demo.Process.Pid); uid != fmt.Sprint(imageUID) {
			t.Errorf("itlproxy runs as uid %s, want %d", uid, imageUID)
		}
		if code, body := get(t, "http://"+adminAddr+"/readyz"); code != http.StatusOK {
			t.Errorf("/readyz: %d %s", code, body)
		}
		_, metrics := get(t, "http://"+adminAddr+"/metrics")
		stamp := fmt.Sprintf(`itlproxy_build_info{goversion=%q,revision=%q,version=%q} 1`, runtime.Version(), testRevision, testVersion)
		if !strings.Contains(metrics, stamp) {
			t.Errorf("/metrics lacks %s", stamp)
		}

		if err := demo.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("itlproxy demo after SIGTERM: %v\n%s", err, log.String())
			}
		case <-time.After(20 * time.Second):
			t.Error("itlproxy demo did not exit within 20s of SIGTERM")
		}
	})
}

// needRoot skips a test that must switch users, loudly; CI runs as root,
// so there it fails instead.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	msg := "NOT ROOT: running the binary as the image's user needs root; SKIPPING IT"
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " is not allowed under CI")
	}
	fmt.Fprintln(os.Stderr, "### "+msg)
	t.Skip(msg)
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
func processUID(t *testing.T, pid int) string {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			return strings.Fields(rest)[0]
		}
	}
	t.Fatal("no Uid in /proc/pid/status")
	return ""
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// copyContext copies the files of the repository that .dockerignore lets
// into the build context.
func copyContext(t *testing.T, repo, dst string) {
	t.Helper()
	ignore, err := os.ReadFile(filepath.Join(repo, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	rules := parseDockerignore(string(ignore))
	n := 0
	err = filepath.WalkDir(repo, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repo, path)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir() && rules.ignored(rel) && !rules.mayInclude(rel):
			return filepath.SkipDir
		case d.IsDir() || rules.ignored(rel):
			return nil
		case !d.Type().IsRegular():
			return fmt.Errorf("%s: not a regular file", rel)
		}
		data, err := os.ReadFile(path)
		if err == nil {
			err = os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dst, rel), data, 0o644)
		}
		n++
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal(".dockerignore leaves an empty build context")
	}
}
