package deadletter_test

import (
	"testing"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// One broker, one identity, however its URL is spelt: a port with
// leading zeros is the same port, and an unspecified address (0.0.0.0,
// ::) reaches the local host. Other hosts, ports, schemes and paths are
// other brokers.
func TestIdentitySpellings(t *testing.T) {
	same := []string{
		"http://localhost:6632", "http://127.0.0.1:6632", "http://127.0.0.1:06632", "http://127.0.0.1:0006632/",
		"http://0.0.0.0:6632", "http://[::]:6632", "http://[::1]:6632", "HTTP://LOCALHOST:6632", "http://localhost.:6632",
		"http://[0:0:0:0:0:0:0:1]:6632",
	}
	want, err := deadletter.Identity(same[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range same {
		if got, err := deadletter.Identity(s); err != nil || got != want {
			t.Errorf("%s: identity %q (%v), want %q", s, got, err, want)
		}
	}
	for _, s := range []string{"http://127.0.0.2:6632", "http://localhost:6633", "https://localhost:6632", "http://localhost:6632/queen", "http://10.0.0.5:6632"} {
		if got, _ := deadletter.Identity(s); got == want {
			t.Errorf("%s: identity %q, the same as localhost:6632's", s, got)
		}
	}
	for _, bad := range []string{"http://localhost:99999", "http://localhost:-1", "http://localhost:0"} {
		if _, err := deadletter.Identity(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	if got, _ := deadletter.Identity("http://localhost"); got != "http://localhost:80" {
		t.Errorf("the default port: %q", got)
	}
}
