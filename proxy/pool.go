package proxy

import "sync"

// copyBufferSize is the size of the buffer httputil.ReverseProxy copies a
// response through: one per response in flight. Its own default is
// 32 KiB; events are a few hundred bytes, and every response in flight
// holds its buffer for as long as it lasts, so a smaller one is most of
// the memory a long stream costs. Large non-streamed bodies simply take
// more reads.
const copyBufferSize = 8 << 10

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
