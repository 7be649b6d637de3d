//go:build itlproxy_parts

package proxy

import (
	"fmt"
	"os"
	"strings"
)

// partsOff are the parts a benchmark build switches off, read once from
// ITLPROXY_PARTS_OFF (comma-separated names of partNames).
var partsOff = func() part {
	off, err := parseParts(os.Getenv("ITLPROXY_PARTS_OFF"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "itlproxy: ITLPROXY_PARTS_OFF: %v\n", err)
		os.Exit(2)
	}
	return off
}()

// PartsOff names the parts this build switched off, comma-separated.
func PartsOff() string {
	var names []string
	for _, p := range partNames {
		if !p.part.on() {
			names = append(names, p.name)
		}
	}
	return strings.Join(names, ",")
}
