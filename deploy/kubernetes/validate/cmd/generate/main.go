package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/itlproxy/itlproxy/deploy/kubernetes/validate"
)

func main() {
	root := flag.String("root", "../../..", "the repository's root directory")
	flag.Parse()
	if err := generate(*root); err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(1)
	}
}

// generate writes every generated file and deletes the chart's copies of
// dashboards that no longer exist.
func generate(root string) error {
	files, err := validate.Generate(root)
	if err != nil {
		return err
	}
	for _, f := range files {
		p := filepath.Join(root, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.Content, 0o644); err != nil {
			return err
		}
	}
	stale, err := validate.Stale(root, files)
	if err != nil {
		return err
	}
	for _, p := range stale {
		if err := os.Remove(filepath.Join(root, filepath.FromSlash(p))); err != nil {
			return err
		}
	}
	return nil
}
