package proxy

import "testing"

func TestParseParts(t *testing.T) {
	off, err := parseParts(" recorder,split ,, routing")
	if err != nil || off != partRecorder|partSplit|partRouting {
		t.Errorf("parseParts = %b, %v", off, err)
	}
	if _, err := parseParts("recorder,tracing"); err == nil {
		t.Error("an unknown part was taken")
	}
	if off, err := parseParts(""); off != 0 || err != nil {
		t.Errorf("empty: %b, %v", off, err)
	}
}
