package proxy

import (
	"sync"
	"time"
)

// Measuring off the forwarding path.
//
// The goroutine that forwards a stream's bytes does the least it can per
// read: it stamps the read (the time it returned, and the model's streams
// in flight then, which the load bands need) and copies its bytes into the
// measurer's queue. The measurer splits, classifies and records them later,
// many streams' reads in one pass, where its code and the shared
// histograms stay warm, instead of right after each read's system call on
// a cold cache. Every stamp is the read's own, so every gap is exactly as
// long as if it had been measured at once; what waits is only the
// bookkeeping.
//
// A batch is measured at most measureDelay after its first read, by a
// goroutine that runs while there are reads to measure and exits when
// there are none. The queue is bounded: a read that would take it past
// maxQueuedBytes measures the whole queue on the forwarding goroutine
// first, so a measurer that falls behind slows the streams down (as
// measuring every read inline did), and no read is ever dropped. When a
// stream ends, its exchange measures what is queued before it records the
// end, so the end always follows the stream's last event.

// measureDelay is how long the first read of a batch waits for others to
// join it: the most an observation lags its read, when the measurer keeps
// up.
const measureDelay = 2 * time.Millisecond

// maxQueuedBytes bounds the bytes waiting to be measured: at 50,000
// events a second of a few hundred bytes, a batch is about 30 KiB. The
// queue and the batch being measured keep their buffers, so that the
// hand-off makes no garbage once they have grown.
const maxQueuedBytes = 256 << 10

// queuedRead is one read waiting to be measured: its meter, its stamp, and
// where its bytes are in the queue.
type queuedRead struct {
	m        *meter
	at       time.Time
	inFlight int64
	end      int // the end of its bytes in queue.bytes
}

// readQueue is a batch of reads, in the order they were made.
type readQueue struct {
	bytes []byte
	reads []queuedRead
}

// measurer measures the reads of many streams in batches.
type measurer struct {
	// mu guards queue and running: the forwarding goroutines append, the
	// measurer takes the queue whole.
	mu      sync.Mutex
	queue   readQueue
	running bool // a goroutine will measure the queue
	// measuring is held while a batch is measured: batches are measured
	// one at a time, in order, whoever measures them.
	measuring sync.Mutex
	spare     readQueue // the batch last measured, emptied: the next queue
}

// add queues a read of m's stream: p is the read's bytes (copied), at when
// it returned, inFlight the model's streams in flight then.
func (w *measurer) add(m *meter, p []byte, at time.Time, inFlight int64) {
	w.mu.Lock()
	for len(w.queue.reads) > 0 && len(w.queue.bytes)+len(p) > maxQueuedBytes {
		w.mu.Unlock()
		w.flush()
		w.mu.Lock()
	}
	w.queue.bytes = append(w.queue.bytes, p...)
	w.queue.reads = append(w.queue.reads, queuedRead{m: m, at: at, inFlight: inFlight, end: len(w.queue.bytes)})
	start := !w.running
	w.running = true
	w.mu.Unlock()
	if start {
		go w.run()
	}
}

// run measures batches, measureDelay apart, until nothing is queued.
func (w *measurer) run() {
	for {
		time.Sleep(measureDelay)
		w.flush()
		w.mu.Lock()
		if len(w.queue.reads) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
	}
}

// flush measures every read queued so far, on the calling goroutine.
func (w *measurer) flush() {
	w.measuring.Lock()
	defer w.measuring.Unlock()
	w.mu.Lock()
	batch := w.queue
	w.queue, w.spare = w.spare, readQueue{}
	w.mu.Unlock()
	if len(batch.reads) == 0 {
		w.spare = batch
		return
	}
	start := 0
	for i, r := range batch.reads {
		r.m.measure(batch.bytes[start:r.end], r.at, r.inFlight)
		start = r.end
		batch.reads[i].m = nil
	}
	w.spare = readQueue{bytes: batch.bytes[:0], reads: batch.reads[:0]}
}
