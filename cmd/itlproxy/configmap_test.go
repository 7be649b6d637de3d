package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// configMapDir lays files out as the kubelet does in a ConfigMap or
// Secret volume: each file is a symlink to ..data/<name>, and ..data a
// symlink to a timestamped directory that holds the files. An update
// writes a new timestamped directory, points a new symlink at it and
// renames that over ..data: the files' own paths never change.
type configMapDir struct {
	t       *testing.T
	dir     string
	version int
}

func newConfigMapDir(t *testing.T, files map[string][]byte) *configMapDir {
	t.Helper()
	c := &configMapDir{t: t, dir: t.TempDir()}
	c.swap(files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(c.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// path returns a file's path as the container sees it.
func (c *configMapDir) path(name string) string { return filepath.Join(c.dir, name) }

// swap updates the volume the kubelet's way and removes the old version.
func (c *configMapDir) swap(files map[string][]byte) {
	c.t.Helper()
	old := c.current()
	c.version++
	next := fmt.Sprintf("..2026_11_22_14_00_%02d.%d", c.version, c.version)
	if err := os.Mkdir(filepath.Join(c.dir, next), 0o755); err != nil {
		c.t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(c.dir, next, name), data, 0o600); err != nil {
			c.t.Fatal(err)
		}
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(next, tmp); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		c.t.Fatal(err)
	}
	if c.version > 1 {
		_ = os.RemoveAll(filepath.Join(c.dir, old))
	}
}

// editUnseen replaces a file inside the current timestamped directory
// (atomically, by rename): nothing changes in the volume's own directory,
// so a watcher of it sees nothing, and only SIGHUP or POST /-/reload put
// the new contents in effect.
func (c *configMapDir) editUnseen(name string, data []byte) {
	c.t.Helper()
	dst := filepath.Join(c.dir, c.current(), name)
	if err := os.WriteFile(dst+".tmp", data, 0o600); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		c.t.Fatal(err)
	}
}

func (c *configMapDir) current() string {
	return fmt.Sprintf("..2026_11_22_14_00_%02d.%d", c.version, c.version)
}
