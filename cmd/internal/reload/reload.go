package reload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// SettleDelay is how long the watcher waits after a change in a watched
// directory before it re-reads: a ConfigMap or Secret update is several
// events (a new timestamped directory, a new symlink, a rename), and a
// certificate rotated in place is two writes.
const SettleDelay = 100 * time.Millisecond

// Options say what a Reloader re-reads and where it puts what it reads.
type Options struct {
	// SLOFile is the SLO file ("" for none), read over the objectives the
	// environment sets (EnvObjectives) and put in effect on Metrics.
	SLOFile       string
	EnvObjectives metrics.Objectives
	Metrics       *metrics.Metrics
	// CertFiles are the certificate files in use.
	CertFiles []*CertFile
	// Outcomes counts every reload's outcome.
	Outcomes *metrics.Reloads
	Log      *zap.Logger
}

// Reloader puts changed files in effect without a restart: the SLO file
// and the TLS certificate files. It re-reads them when their directory
// changes (a Kubernetes ConfigMap or Secret volume swaps a ..data symlink
// in the directory, so the files themselves never see an event), on
// SIGHUP, and when asked (Reload: the admin listener's POST /-/reload).
// (The admin listener's web configuration file is not among them:
// exporter-toolkit re-reads it at every request and handshake.)
type Reloader struct {
	o Options

	mu         sync.Mutex // one reload at a time
	sloBytes   []byte     // the SLO file in effect
	sloRefused string     // the SLO file last refused and why, logged once
}

// New returns the reloader of o's files.
func New(o Options) *Reloader {
	// sloBytes starts empty: the first change in the SLO file's directory
	// re-reads it, so that a change since it was first read is not missed.
	return &Reloader{o: o}
}

// Reload re-reads every file and puts in effect those that are valid; the
// error says why each file on disk is refused. trigger says what asked,
// in the log.
func (r *Reloader) Reload(trigger string) error { return r.reload(trigger, false) }

// reload re-reads every file and puts in effect those that are valid.
// onlyChanged skips an SLO file whose bytes are those in effect (the
// watcher sees changes of other files in the same directory). The error
// says why each file on disk is refused.
func (r *Reloader) reload(trigger string, onlyChanged bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return errors.Join(r.reloadTLS(trigger), r.reloadSLOs(trigger, onlyChanged))
}

// reloadTLS re-reads the certificate files. A refused file is logged and
// counted once, however often it is re-read.
func (r *Reloader) reloadTLS(trigger string) error {
	var refused []error
	for _, f := range r.o.CertFiles {
		changed, err := f.Load()
		switch {
		case err != nil && changed:
			r.o.Outcomes.TLSFailed(f.Role())
			r.o.Log.Error("certificate files refused: the ones in use stay",
				zap.String("file", f.Role()), zap.Strings("paths", f.Files()), zap.String("trigger", trigger), zap.Error(err))
		case err == nil && changed:
			r.o.Log.Info("certificate files reloaded", zap.String("file", f.Role()), zap.String("trigger", trigger))
		}
		if err != nil {
			refused = append(refused, fmt.Errorf("%s (%s): %w", f.Role(), strings.Join(f.Files(), ", "), err))
		}
	}
	return errors.Join(refused...)
}

// reloadSLOs re-reads the SLO file, and puts it in effect if it is valid.
func (r *Reloader) reloadSLOs(trigger string, onlyChanged bool) error {
	if r.o.SLOFile == "" {
		return nil
	}
	data, err := os.ReadFile(r.o.SLOFile)
	if err == nil && onlyChanged && bytes.Equal(data, r.sloBytes) {
		return nil
	}
	var slos metrics.SLOs
	if err == nil {
		slos, err = metrics.ParseSLOFile(r.o.SLOFile, data, r.o.EnvObjectives)
	}
	if err != nil {
		refused := string(data) + "\x00" + err.Error()
		if onlyChanged && refused == r.sloRefused {
			return err // refused and logged already
		}
		r.sloRefused = refused
		r.o.Outcomes.Config(false, time.Now())
		r.o.Log.Error("SLO file refused: the objectives in use stay",
			zap.String("file", r.o.SLOFile), zap.String("trigger", trigger), zap.Strings("problems", strings.Split(err.Error(), "\n")))
		return err
	}
	r.o.Metrics.ReloadSLOs(slos)
	r.sloBytes, r.sloRefused = data, ""
	r.o.Outcomes.Config(true, time.Now())
	r.o.Log.Info("SLO file reloaded: new streams are judged against it", zap.String("file", r.o.SLOFile), zap.String("trigger", trigger))
	return nil
}

// Start watches the files' directories and SIGHUP until stop is called.
func (r *Reloader) Start() (stop func(), err error) {
	dirs := map[string]bool{}
	var paths []string
	if r.o.SLOFile != "" {
		paths = append(paths, r.o.SLOFile)
	}
	for _, f := range r.o.CertFiles {
		paths = append(paths, f.Files()...)
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
func (r *Reloader) watch(ctx context.Context, w *fsnotify.Watcher, hup <-chan os.Signal) {
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
			settle.Reset(SettleDelay)
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			if !errors.Is(err, fsnotify.ErrEventOverflow) {
				r.o.Log.Warn("watching the configuration files", zap.Error(err))
			}
			settle.Reset(SettleDelay) // events may have been lost
		case <-settle.C:
			_ = r.reload("file change", true)
		}
	}
}
