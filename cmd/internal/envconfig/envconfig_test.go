package envconfig

import "testing"

func TestByteSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "512KiB": 512 << 10, "32 MiB": 32 << 20, "2GiB": 2 << 30} {
		var b ByteSize
		if err := b.UnmarshalText([]byte(in)); err != nil || int64(b) != want {
			t.Errorf("%q: got %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5MiB", "1MB", "MiB", "99999999999GiB"} {
		var b ByteSize
		if err := b.UnmarshalText([]byte(in)); err == nil {
			t.Errorf("%q: accepted as %d", in, b)
		}
	}
}

func TestShowURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://vllm:8000/v1": "http://vllm:8000/v1",
		"http://key-id:secret@api.example.com/v1?api_key=secret": "http://api.example.com/v1",
		"https://key-id@api.example.com?":                        "https://api.example.com",
		"http://a:1/v1?k=secret#frag, http://user:pw@b:2/v1?k=s": "http://a:1/v1,http://b:2/v1",
		"user:secret@collector:4318":                             "collector:4318",
		"collector:4318?token=secret":                            "collector:4318",
		"http://us er:pw@host":                                   "(unparsable URL)",
		"":                                                       "",
	} {
		if got := ShowURL(in); got != want {
			t.Errorf("ShowURL(%q) = %q, want %q", in, got, want)
		}
	}
}
