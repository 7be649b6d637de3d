//go:build !itlproxy_parts

package proxy

// partsOff is 0 in the product: every part is on, and each check of it is
// a constant the compiler drops.
const partsOff part = 0

// PartsOff names the parts this build switched off: none.
func PartsOff() string { return "" }
