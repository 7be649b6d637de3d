package proxy

import "sync"

// copyBufferSize is the size of the buffer httputil.ReverseProxy copies a
// response through: one per response in flight. Its own default is
// 32 KiB; events are a few hundred bytes, every response in flight holds
// its buffer for as long as it lasts, and the transport reads the upstream
// through a 4 KiB buffer anyway, so 4 KiB costs no extra reads for
// streams. Large non-streamed bodies simply take more reads.
const copyBufferSize = 4 << 10

// bufferPool recycles copy buffers between responses (httputil.BufferPool).
type bufferPool struct{ pool sync.Pool }

func newBufferPool() *bufferPool {
	return &bufferPool{pool: sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}}
}

func (p *bufferPool) Get() []byte { return *p.pool.Get().(*[]byte) }

func (p *bufferPool) Put(b []byte) {
	if cap(b) == copyBufferSize {
		p.pool.Put(&b)
	}
}
