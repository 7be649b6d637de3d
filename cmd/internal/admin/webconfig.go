package admin

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/prometheus/exporter-toolkit/web"
	"go.uber.org/zap/exp/zapslog"
	"go.yaml.in/yaml/v3"
)

// WebConfig is what the admin listener's web configuration file
// (ITLPROXY_WEB_CONFIG_FILE) said when itlproxy started. exporter-toolkit
// re-reads the file itself while serving; this is only for the start-up
// warnings and log line, and the scheme the demo prints.
type WebConfig struct {
	file string
	// tls: the file sets tls_server_config, so the admin listener speaks
	// HTTPS. Decided once, at start, as exporter-toolkit does.
	tls bool
	// users is how many basic_auth_users the file lists.
	users int
	// clientAuth is tls_server_config's client_auth_type.
	clientAuth string
}

// LoadWebConfig checks the web configuration file as exporter-toolkit
// reads it (strictly: an unknown key is an error), with the certificate
// files and bcrypt hashes it names, and returns what it says, or the
// problem, naming the variable.
func LoadWebConfig(file string) (WebConfig, string) {
	if file == "" {
		return WebConfig{}, ""
	}
	problem := func(err error) string {
		msg := oneLine(err.Error())
		if strings.HasPrefix(msg, "crypto/bcrypt: ") {
			msg = "basic_auth_users: a password is not a bcrypt hash (" + msg + `); make one with htpasswd -nBC 10 "" | tr -d ':\n'`
		}
		return fmt.Sprintf("ITLPROXY_WEB_CONFIG_FILE=%q: %s", file, msg)
	}
	if err := web.Validate(file); err != nil {
		return WebConfig{}, problem(err)
	}
	var c web.Config
	data, err := os.ReadFile(file)
	if err == nil {
		err = yaml.Unmarshal(data, &c)
	}
	if err != nil {
		return WebConfig{}, problem(err)
	}
	return WebConfig{file: file, tls: c.TLSConfig.IsEnabled(), users: len(c.Users), clientAuth: c.TLSConfig.ClientAuth}, ""
}

// oneLine puts a multi-line error (a YAML decoder's list of unknown
// fields) on one line of the configuration error.
func oneLine(msg string) string {
	first, rest, ok := strings.Cut(msg, "\n")
	if !ok {
		return msg
	}
	var more []string
	for line := range strings.SplitSeq(rest, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			more = append(more, line)
		}
	}
	return first + " " + strings.Join(more, "; ")
}

// Warnings are the start-up warnings of a web configuration that leaves
// the admin listener weaker than its operator may think.
func (w WebConfig) Warnings() []string {
	if w.file == "" {
		return nil
	}
	var out []string
	if w.users > 0 && !w.tls {
		out = append(out, "ITLPROXY_WEB_CONFIG_FILE has basic_auth_users but no tls_server_config: "+
			"the passwords cross the network in clear text")
	}
	if w.users == 0 && w.clientAuth != "RequireAndVerifyClientCert" {
		out = append(out, "ITLPROXY_WEB_CONFIG_FILE asks for no credentials (no basic_auth_users, no verified client certificate): "+
			"every admin path stays open to whoever reaches the port")
	}
	switch w.clientAuth {
	case "RequireAndVerifyClientCert", "RequireAnyClientCert", "RequireClientCert":
		out = append(out, "ITLPROXY_WEB_CONFIG_FILE's client_auth_type requires a client certificate of every connection, "+
			"the probes' too: a kubelet's httpGet probe presents none (see docs/admin-access.md)")
	}
	return out
}

// Scheme is the admin listener's URL scheme.
func (w WebConfig) Scheme() string {
	if w.tls {
		return "https"
	}
	return "http"
}

// serve serves the admin listener: plain HTTP without a web
// configuration file. With one, exporter-toolkit's web.Serve serves it,
// exactly as Prometheus serves its own port: TLS from the file, re-read at
// every handshake (certificate, key, client CA), and basic auth, re-read
// at every request (users and their bcrypt hashes). The probes alone are
// answered before the toolkit's authentication (see openProbes).
func (s *Server) serve(srv *http.Server, ln net.Listener) error {
	if s.o.Web.file == "" {
		return srv.Serve(ln)
	}
	file := s.o.Web.file
	logger := slog.New(zapslog.NewHandler(s.o.Log.Core(), zapslog.WithName("admin")))
	return web.Serve(&openProbes{Listener: ln, srv: srv, given: srv.Handler, probes: s.probes()}, srv,
		&web.FlagConfig{WebConfigFile: &file}, logger)
}

// openProbes is the admin listener as web.Serve receives it. The toolkit
// authenticates every request to the server's handler, and offers no way
// to leave a path open (its authenticating handler is unexported, made
// inside Serve); but the kubelet's probes present no credentials. Serve
// replaces the server's handler with its authenticating one before it
// accepts the first connection, in the goroutine that then calls Accept:
// so the first Accept, before any request can be read, puts in front of
// that handler one that answers GET of the probes' paths itself and hands
// every other request, of any path, to the toolkit's.
type openProbes struct {
	net.Listener
	srv    *http.Server
	given  http.Handler // the handler before Serve, to check that Serve wrapped it
	probes map[string]http.HandlerFunc

	once sync.Once
	err  error
}

func (l *openProbes) Accept() (net.Conn, error) {
	l.once.Do(func() {
		authenticated := l.srv.Handler
		if authenticated == l.given {
			// A toolkit that stopped wrapping the handler would serve
			// every path without the file's credentials: refuse to serve.
			l.err = errors.New("admin listener: exporter-toolkit did not put its authentication in front of the admin paths; refusing to serve them")
			return
		}
		l.srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if probe := l.probes[r.URL.Path]; probe != nil && r.Method == http.MethodGet {
				probe(w, r)
				return
			}
			authenticated.ServeHTTP(w, r)
		})
	})
	if l.err != nil {
		return nil, l.err
	}
	return l.Listener.Accept()
}
