package main

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// problem is one bad variable: its name, its value (empty when unset or
// secret) and why it was refused.
type problem struct {
	key, value, why string
}

func (p problem) String() string {
	if p.value == "" {
		return p.key + ": " + p.why
	}
	return fmt.Sprintf("%s=%q: %s", p.key, p.value, p.why)
}

// validate returns every problem with the parsed values.
func (c config) validate(demo bool) []problem {
	var ps []problem
	add := func(key, value, why string) { ps = append(ps, problem{key, value, why}) }
	c.validateAddresses(demo, add)
	c.validateLimits(add)
	c.validateDurations(add)
	c.validateSessions(add)
	c.validateLogging(add)
	c.validateRecorder(add)
	c.Config.Validate(add)
	return ps
}

// validateAddresses checks the upstream URL and the two listen addresses.
func (c config) validateAddresses(demo bool, add func(key, value, why string)) {
	c.validateUpstream(demo, add)
	listenOK := checkAddr(c.ListenAddr)
	if !listenOK {
		add("ITLPROXY_LISTEN_ADDR", c.ListenAddr, "not a host:port address (e.g. :8080, 127.0.0.1:8080)")
	}
	switch {
	case !checkAddr(c.AdminAddr):
		add("ITLPROXY_ADMIN_ADDR", c.AdminAddr, "not a host:port address (e.g. :9090, 127.0.0.1:9090)")
	case listenOK && samePort(c.ListenAddr, c.AdminAddr):
		add("ITLPROXY_ADMIN_ADDR", c.AdminAddr, "must differ from ITLPROXY_LISTEN_ADDR: the proxy port serves only proxied traffic")
	}
}

// validateLimits checks the bounds on labels, bodies, events and headers.
func (c config) validateLimits(add func(key, value, why string)) {
	if c.MaxModels < 1 {
		add("ITLPROXY_MAX_MODELS", strconv.Itoa(c.MaxModels), "must be at least 1")
	}
	if c.MaxRequestBytes < 1 {
		add("ITLPROXY_MAX_REQUEST_BYTES", strconv.FormatInt(int64(c.MaxRequestBytes), 10), "must be at least 1")
	}
	if c.MaxEventBytes < 1024 || c.MaxEventBytes > 1<<30 {
		add("ITLPROXY_MAX_EVENT_BYTES", strconv.FormatInt(int64(c.MaxEventBytes), 10), "must be between 1KiB and 1GiB")
	}
	if c.MaxHeaderBytes < 1024 || c.MaxHeaderBytes > 16<<20 {
		add("ITLPROXY_MAX_HEADER_BYTES", strconv.FormatInt(int64(c.MaxHeaderBytes), 10), "must be between 1KiB and 16MiB")
	}
	if c.ClientSendBuffer != 0 && (c.ClientSendBuffer < 4096 || c.ClientSendBuffer > 64<<20) {
		add("ITLPROXY_CLIENT_SEND_BUFFER", strconv.FormatInt(int64(c.ClientSendBuffer), 10), "must be 0, or between 4KiB and 64MiB")
	}
}

// validateDurations checks timeouts, objectives and TLS verification.
func (c config) validateDurations(add func(key, value, why string)) {
	if c.ReadHeaderTimeout <= 0 {
		add("ITLPROXY_READ_HEADER_TIMEOUT", c.ReadHeaderTimeout.String(), "must be positive")
	}
	if c.UpstreamCAFile != "" && c.UpstreamInsecureSkipVerify {
		add("ITLPROXY_UPSTREAM_INSECURE_SKIP_VERIFY", "true", "contradicts ITLPROXY_UPSTREAM_CA_FILE: verify with the CA file, or do not verify")
	}
	for _, d := range []struct {
		key string
		d   time.Duration
	}{
		{"ITLPROXY_UPSTREAM_TIMEOUT", c.UpstreamTimeout},
		{"ITLPROXY_STREAM_IDLE_TIMEOUT", c.StreamIdleTimeout},
		{"ITLPROXY_CLIENT_IDLE_TIMEOUT", c.ClientIdleTimeout},
		{"ITLPROXY_SLO_TTFT", c.SLOTTFT},
		{"ITLPROXY_SLO_ITL", c.SLOITL},
		{"ITLPROXY_SLO_TPOT", c.SLOTPOT},
		{"ITLPROXY_SLO_MAX_GAP", c.SLOMaxGap},
		{"ITLPROXY_STALL_THRESHOLD", c.StallThreshold},
		{"ITLPROXY_SHUTDOWN_DELAY", c.ShutdownDelay},
		{"ITLPROXY_SHUTDOWN_TIMEOUT", c.ShutdownTimeout},
	} {
		if d.d < 0 {
			add(d.key, d.d.String(), "must not be negative")
		}
	}
}

// validateSessions checks session tracking, service classes and tenants.
func (c config) validateSessions(add func(key, value, why string)) {
	if !validHeaderName(c.ClassHeader) {
		add("ITLPROXY_CLASS_HEADER", c.ClassHeader, "not a header name")
	}
	switch {
	case c.TenantHeader != "" && !validHeaderName(c.TenantHeader):
		add("ITLPROXY_TENANT_HEADER", c.TenantHeader, "not a header name")
	case credentialHeader(c.TenantHeader):
		add("ITLPROXY_TENANT_HEADER", c.TenantHeader, "carries credentials, which never become label values: name a header that says who the tenant is (e.g. X-Tenant)")
	}
	if c.MaxTenants < 1 {
		add("ITLPROXY_MAX_TENANTS", strconv.Itoa(c.MaxTenants), "must be at least 1")
	}
	if !validHeaderName(c.SessionHeader) {
		add("ITLPROXY_SESSION_HEADER", c.SessionHeader, "not a header name")
	}
	if c.SessionMax < 1 {
		add("ITLPROXY_SESSION_MAX", strconv.Itoa(c.SessionMax), "must be at least 1")
	}
	if c.SessionTTL <= 0 {
		add("ITLPROXY_SESSION_TTL", c.SessionTTL.String(), "must be positive")
	}
	if !(c.SessionDegradeFactor > 1) { // NaN too
		add("ITLPROXY_SESSION_DEGRADE_FACTOR", strconv.FormatFloat(c.SessionDegradeFactor, 'g', -1, 64), "must be greater than 1")
	}
}

// validateLogging checks the log settings and the demo's client count.
func (c config) validateLogging(add func(key, value, why string)) {
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		add("ITLPROXY_LOG_LEVEL", c.LogLevel, "must be debug, info, warn or error")
	}
	switch c.LogFormat {
	case "json", "console":
	default:
		add("ITLPROXY_LOG_FORMAT", c.LogFormat, "must be json or console")
	}
	if c.DemoClients < 0 {
		add("ITLPROXY_DEMO_CLIENTS", strconv.Itoa(c.DemoClients), "must not be negative")
	}
}

// validateRecorder checks the stream recorder's bounds, which bound its
// memory.
func (c config) validateRecorder(add func(key, value, why string)) {
	for _, n := range []struct {
		key      string
		n, limit int
	}{
		{"ITLPROXY_RECORDER_STREAMS", c.RecorderStreams, 100000},
		{"ITLPROXY_RECORDER_SLOWEST", c.RecorderSlowest, 10000},
		{"ITLPROXY_RECORDER_MAX_GAPS", c.RecorderMaxGaps, 65536},
	} {
		if n.n < 0 || n.n > n.limit {
			add(n.key, strconv.Itoa(n.n), fmt.Sprintf("must be between 0 and %d", n.limit))
		}
	}
	if c.RecorderWindow <= 0 {
		add("ITLPROXY_RECORDER_WINDOW", c.RecorderWindow.String(), "must be positive")
	}
}

// checkUpstream returns why raw is not a usable upstream URL, or "".
func checkUpstream(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "not a URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return "scheme must be http or https"
	case u.Host == "":
		return "no host"
	case u.Fragment != "":
		return "must not have a #fragment"
	}
	return ""
}

// credentialHeader reports whether a header carries credentials: the
// standard ones, API-key headers and anything named like a secret.
func credentialHeader(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case "authorization", "proxy-authorization", "cookie", "set-cookie":
		return true
	}
	for _, part := range []string{"auth", "key", "token", "secret", "password", "credential", "cookie"} {
		if strings.Contains(n, part) {
			return true
		}
	}
	return false
}

// validHeaderName reports whether name is an HTTP field name (RFC 9110
// token).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}

func checkAddr(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535
}

// samePort reports whether two listen addresses would collide: the same
// non-zero port on overlapping hosts.
func samePort(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	if pa != pb || pa == "0" {
		return false
	}
	return ha == hb || ha == "" || hb == ""
}
