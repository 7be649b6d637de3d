package metrics

import (
	"math"
	"testing"
)

func TestLoadBand(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{-1, "1"}, {0, "1"}, {1, "1"}, {2, "2"}, {3, "3-4"}, {4, "3-4"}, {5, "5-8"}, {8, "5-8"},
		{9, "9-16"}, {16, "9-16"}, {17, "17-32"}, {32, "17-32"}, {33, "33-64"}, {64, "33-64"},
		{65, "65-128"}, {128, "65-128"}, {129, "129-256"}, {256, "129-256"}, {257, "257-512"},
		{512, "257-512"}, {513, "513+"}, {1 << 20, "513+"}, {math.MaxInt64, "513+"},
	} {
		if got := loadBandLabels[loadBand(c.n)]; got != c.want {
			t.Errorf("loadBand(%d) = %s, want %s", c.n, got, c.want)
		}
	}
	// Each band's upper bound is the largest count in it.
	for i := range loadBands - 1 {
		up := int64(loadBandUpper(i))
		if loadBand(up) != i || loadBand(up+1) != i+1 {
			t.Errorf("band %s: upper bound %d does not end it", loadBandLabels[i], up)
		}
	}
	if !math.IsInf(loadBandUpper(loadBands-1), 1) {
		t.Error("the last band is unbounded")
	}
}
