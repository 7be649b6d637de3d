package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/e2e"
	"github.com/itlproxy/itlproxy/internal/testdns"
	"github.com/itlproxy/itlproxy/internal/testenv"
	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// socketsTo counts the TCP sockets process pid holds open (a file
// descriptor of its own, in any state) to each remote address, as
// /proc shows them: its descriptors' socket inodes, matched in its
// network namespace's /proc/<pid>/net/tcp and tcp6.
func socketsTo(t *testing.T, pid int) map[string]int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	out := map[string]int{}
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || !inodes[fields[9]] {
				continue
			}
			if addr := procAddr(fields[2]); addr != "" {
				out[addr]++
			}
		}
		f.Close()
	}
	return out
}

// procAddr reads an address of /proc/net/tcp: an IPv4 address as a
// little-endian word in hex, and the port, as "0100007F:1F90".
func procAddr(s string) string {
	ipHex, portHex, ok := strings.Cut(s, ":")
	b, err := hex.DecodeString(ipHex)
	port, perr := strconv.ParseUint(portHex, 16, 16)
	if !ok || err != nil || perr != nil || len(b) != 4 {
		return "" // IPv6: not the pods' addresses here
	}
	return net.JoinHostPort(net.IPv4(b[3], b[2], b[1], b[0]).String(), strconv.FormatUint(port, 10))
}

// TestDepartedServerKeepsNoSocket runs itlproxy over the addresses of a
// dual-stack name (an A and an AAAA record per pod) and, once streams have
// left idle connections to every pod, drops two pods from the name: one
// that stays up (a pod taken out of its Service) and one killed. A few
// seconds after the resolution that dropped them, the process holds no
// socket to either (as /proc shows its descriptors), and still holds its
// idle ones to the pod that stayed. The name counts one server per pod.
func TestDepartedServerKeepsNoSocket(t *testing.T) {
	if _, err := os.Stat("/proc/self/net/tcp"); err != nil {
		testenv.Missing(t, "/proc ("+err.Error()+")", "run the tests on Linux, as CI does")
	}
	ips := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	port := freePortOn(t, ips...)
	pods := []*podServer{
		startPod(t, ips[0], port, time.Millisecond),
		startPod(t, ips[1], port, time.Millisecond),
		startPod(t, ips[2], port, time.Millisecond),
	}
	dnsServer := testdns.Start(t, "llm.test.", append(ips, "fd00::2", "fd00::3", "fd00::4")...)
	proxy := e2e.Start(t, map[string]string{
		"ITLPROXY_UPSTREAM_URL":              fmt.Sprintf("http://llm.test:%d", port),
		"ITLPROXY_UPSTREAM_RESOLVE":          "dns",
		"ITLPROXY_UPSTREAM_RESOLVER":         dnsServer.Addr,
		"ITLPROXY_UPSTREAM_RESOLVE_INTERVAL": "500ms",
	})
	scrapeProxy := func() scrape.Families { return scrapeAdmin(t, proxy.Admin) }
	if n := scrapeProxy().Value("itlproxy_upstream_endpoints"); n != 3 {
		t.Errorf("%v servers for 3 dual-stack pods, want 3", n)
	}
	if _, failed := gatewayLoad(proxy.Proxy, 6, time.Second); len(failed) > 0 {
		t.Fatalf("%d streams failed: %v", len(failed), failed[:min(3, len(failed))])
	}
	pid := proxy.Cmd.Process.Pid
	before := socketsTo(t, pid)
	for _, p := range pods {
		if before[p.addr] == 0 {
			t.Fatalf("no idle connection to %s after the load: %v", p.addr, before)
		}
	}

	alive, killed := pods[1], pods[2]
	killed.kill()
	dnsServer.Set(ips[0], "fd00::2")
	e2e.WaitFor(t, "the resolution that drops two pods", 5*time.Second, func() bool {
		return scrapeProxy().Value("itlproxy_upstream_endpoints") == 1
	})
	var left map[string]int
	e2e.WaitFor(t, "no socket to the pods that left", 3*time.Second, func() bool {
		left = socketsTo(t, pid)
		return left[alive.addr] == 0 && left[killed.addr] == 0
	})
	if left[pods[0].addr] == 0 {
		t.Errorf("no socket left to %s, the pod that stayed: %v", pods[0].addr, left)
	}
	t.Logf("sockets by pod before %v, after %v", before, left)
}
