// Package streamtest holds what the tests of proxy and proxy/events share:
// the recorded streams (testdata/streams, and the native APIs' in
// testdata/native, each described in its README), the ways of cutting a
// stream into reads, and the per-event benchmark report. Only tests import
// it.
package streamtest
