package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/dlqctl/dlqctl/pkg/client"
)

// A list answer that is not a listing is an error: never an empty DLQ.
// The empty forms brokers really send are empty pages.
func TestAnswersThatAreNotListings(t *testing.T) {
	for _, c := range []struct {
		body  string
		empty bool
	}{
		{`{"success": false, "message": "database unavailable"}`, false},
		{`{"success": false}`, false},
		{`{}`, false},
		{`{"pagination": {"limit": 100, "offset": 0}, "total": 0}`, false},
		{`{"messages": {"id": 1}}`, false},
		{`{"messages": "none"}`, false},
		{`{"messages": 0}`, false},
		{`{"messages": true}`, false},
		{`{"value": null}`, false},
		{`{"success": true, "value": 3}`, false},
		{`{"messages": [], "success": false, "error": null}`, false},
		// The empty forms: a page of no rows, the 0.x server's answer past
		// its one page, and messages null.
		{`{"messages": [], "total": 0}`, true},
		{`{"messages": []}`, true},
		{`{"success": true, "value": null}`, true},
		{`{"messages": null}`, true},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(c.body))
		}))
		c2 := newClient(t, srv.URL)
		page, err := c2.ListPage(context.Background(), client.ListQuery{Limit: 10})
		srv.Close()
		switch {
		case c.empty && (err != nil || len(page.Rows) != 0):
			t.Errorf("%s: %v, %d rows: want an empty page", c.body, err, len(page.Rows))
		case !c.empty && err == nil:
			t.Errorf("%s: an empty page, no error", c.body)
		case !c.empty && !errors.Is(err, client.ErrUnavailable) && !errors.Is(err, client.ErrBadResponse):
			t.Errorf("%s: %v, want a broker error (exit 3)", c.body, err)
		}
	}
}
