package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/metrics"
)

// settleDelay is how long the watcher waits after a change in a watched
// directory before it re-reads: a ConfigMap or Secret update is several
// events (a new timestamped directory, a new symlink, a rename), and a
// certificate rotated in place is two writes.
const settleDelay = 100 * time.Millisecond

// reloader puts changed files in effect without a restart: the SLO file
// and the TLS certificate files. It re-reads them when their directory
// changes (a Kubernetes ConfigMap or Secret volume swaps a ..data symlink
// in the directory, so the files themselves never see an event), on
// SIGHUP, and on POST /-/reload when the lifecycle endpoint is on. (The
// admin listener's web configuration file is not among them:
// exporter-toolkit re-reads it at every request and handshake.)
type reloader struct {
	cfg      config
	log      *zap.Logger
	rec      *metrics.Metrics
	outcomes *metrics.Reloads

	mu         sync.Mutex // one reload at a time
	sloBytes   []byte     // the SLO file in effect
	sloRefused string     // the SLO file last refused and why, logged once
}

func newReloader(cfg config, log *zap.Logger, rec *metrics.Metrics, outcomes *metrics.Reloads) *reloader {
	// sloBytes starts empty: the first change in the SLO file's directory
	// re-reads it, so that a change since loadConfig read it is not missed.
	return &reloader{cfg: cfg, log: log, rec: rec, outcomes: outcomes}
}

// envObjectives are the objectives the environment sets, under the SLO
// file's.
func (c config) envObjectives() metrics.Objectives {
	return metrics.Objectives{TTFT: c.SLOTTFT, ITL: c.SLOITL, TPOT: c.SLOTPOT, MaxGap: c.SLOMaxGap}
}

// reload re-reads every file and puts in effect those that are valid.
// onlyChanged skips an SLO file whose bytes are those in effect (the
// watcher sees changes of other files in the same directory). The error
// says why each file on disk is refused.
func (r *reloader) reload(trigger string, onlyChanged bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return errors.Join(r.reloadTLS(trigger), r.reloadSLOs(trigger, onlyChanged))
}

// reloadTLS re-reads the certificate files. A refused file is logged and
// counted once, however often it is re-read.
func (r *reloader) reloadTLS(trigger string) error {
	var refused []error
	for _, f := range r.cfg.tlsFiles {
		changed, err := f.load()
		switch {
		case err != nil && changed:
			r.outcomes.TLSFailed(f.role)
			r.log.Error("certificate files refused: the ones in use stay",
				zap.String("file", f.role), zap.Strings("paths", f.files()), zap.String("trigger", trigger), zap.Error(err))
		case err == nil && changed:
			r.log.Info("certificate files reloaded", zap.String("file", f.role), zap.String("trigger", trigger))
		}
		if err != nil {
			refused = append(refused, fmt.Errorf("%s (%s): %w", f.role, strings.Join(f.files(), ", "), err))
		}
	}
	return errors.Join(refused...)
}

// reloadSLOs re-reads the SLO file, and puts it in effect if it is valid.
func (r *reloader) reloadSLOs(trigger string, onlyChanged bool) error {
	if r.cfg.SLOFile == "" {
		return nil
	}
	data, err := os.ReadFile(r.cfg.SLOFile)
	if err == nil && onlyChanged && bytes.Equal(data, r.sloBytes) {
		return nil
	}
	var slos metrics.SLOs
	if err == nil {
		slos, err = metrics.ParseSLOFile(r.cfg.SLOFile, data, r.cfg.envObjectives())
	}
	if err != nil {
		refused := string(data) + "\x00" + err.Error()
		if onlyChanged && refused == r.sloRefused {
			return err // refused and logged already
		}
		r.sloRefused = refused
		r.outcomes.Config(false, time.Now())
		r.log.Error("SLO file refused: the objectives in use stay",
			zap.String("file", r.cfg.SLOFile), zap.String("trigger", trigger), zap.Strings("problems", strings.Split(err.Error(), "\n")))
		return err
	}
	r.rec.ReloadSLOs(slos)
	r.sloBytes, r.sloRefused = data, ""
	r.outcomes.Config(true, time.Now())
	r.log.Info("SLO file reloaded: new streams are judged against it", zap.String("file", r.cfg.SLOFile), zap.String("trigger", trigger))
	return nil
}

// ServeHTTP is POST /-/reload: 200 when every file is in effect, 500 with
// the reasons a file is refused; 403, reloading nothing, unless
// ITLPROXY_WEB_ENABLE_LIFECYCLE is set (as Prometheus refuses it without
// --web.enable-lifecycle).
func (r *reloader) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if !r.cfg.WebEnableLifecycle {
		http.Error(w, "POST /-/reload is off: set ITLPROXY_WEB_ENABLE_LIFECYCLE=true to serve it "+
			"(SIGHUP and changes to the files reload them without it)", http.StatusForbidden)
		return
	}
	if err := r.reload("http", false); err != nil {
		http.Error(w, "refused, what is in use stays:\n"+err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = io.WriteString(w, "reloaded\n")
}

// start watches the files' directories and SIGHUP until stop is called.
func (r *reloader) start() (stop func(), err error) {
	dirs := map[string]bool{}
	var paths []string
	if r.cfg.SLOFile != "" {
		paths = append(paths, r.cfg.SLOFile)
	}
	for _, f := range r.cfg.tlsFiles {
		paths = append(paths, f.files()...)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	for _, p := range paths {
		dir := filepath.Dir(p)
		if dirs[dir] {
			continue
		}
		dirs[dir] = true
		if err := w.Add(dir); err != nil {
			w.Close()
			return nil, err
		}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.watch(ctx, w, hup)
	}()
	return func() {
		signal.Stop(hup)
		cancel()
		w.Close()
		<-done
	}, nil
}

// watch reloads on SIGHUP, and once changes in a watched directory settle.
func (r *reloader) watch(ctx context.Context, w *fsnotify.Watcher, hup <-chan os.Signal) {
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	for {
		select {
		case <-ctx.Done():
			settle.Stop()
			return
		case <-hup:
			_ = r.reload("SIGHUP", false)
		case _, ok := <-w.Events:
			if !ok {
				return
			}
			settle.Reset(settleDelay)
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			if !errors.Is(err, fsnotify.ErrEventOverflow) {
				r.log.Warn("watching the configuration files", zap.Error(err))
			}
			settle.Reset(settleDelay) // events may have been lost
		case <-settle.C:
			_ = r.reload("file change", true)
		}
	}
}
