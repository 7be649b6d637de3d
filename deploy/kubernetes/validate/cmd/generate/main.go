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
	files, err := validate.Generate(*root)
	if err == nil {
		for _, f := range files {
			if err = os.WriteFile(filepath.Join(*root, filepath.FromSlash(f.Path)), f.Content, 0o644); err != nil {
				break
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(1)
	}
}
