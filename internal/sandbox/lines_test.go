package sandbox

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// lineBroker is a broker speaking a line, with two messages of orders:
// m1 dead-lettered by billing and shipping, m2 by billing alone.
func lineBroker(t *testing.T, l Line) (*Broker, *httptest.Server) {
	t.Helper()
	now := time.Now()
	b := New(nil)
	b.SetLine(l)
	b.AddQueue("orders", false, 3, "billing", "shipping")
	b.AddDeadLetters(
		DeadLetter{Queue: "orders", Partition: "p1", TransactionID: "m1", ConsumerGroup: "billing", Error: "e", FailedAt: now.Add(-3 * time.Minute), Data: json.RawMessage(`{"n":1}`)},
		DeadLetter{Queue: "orders", Partition: "p1", TransactionID: "m1", ConsumerGroup: "shipping", Error: "e", FailedAt: now.Add(-2 * time.Minute), Data: json.RawMessage(`{"n":1}`)},
		DeadLetter{Queue: "orders", Partition: "p2", TransactionID: "m2", ConsumerGroup: "billing", Error: "e", FailedAt: now.Add(-time.Minute), Data: json.RawMessage(`{"n":2}`)},
	)
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(srv.Close)
	return b, srv
}

func call(t *testing.T, method, url, body string) (int, map[string]any, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var v map[string]any
	_ = json.Unmarshal(raw, &v)
	return resp.StatusCode, v, resp.Header
}

func rowsOf(t *testing.T, url string) []map[string]any {
	t.Helper()
	resp, err := http.Get(url + "/api/v1/dlq?limit=100")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page struct{ Messages []map[string]any }
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		t.Fatal(err)
	}
	return page.Messages
}

// /health tells the lines apart as QUEEN-RELEASES.md says: 0.x by its
// server key (its version says 1.0.0 whatever it is), 1.x by engine
// segments-rust, 2.x by engine raft; 1.6 from 1.5 by the kv route.
func TestHealthAndProbesOfEachLine(t *testing.T) {
	for _, c := range []struct {
		line   Line
		engine any
		server bool
		kv     int
	}{
		{Queen015, nil, true, 404},
		{Queen15, "segments-rust", false, 404},
		{Queen16, "segments-rust", false, 200},
		{Queen22, "raft", false, 200},
	} {
		_, srv := lineBroker(t, c.line)
		_, h, _ := call(t, "GET", srv.URL+"/health", "")
		if h["engine"] != c.engine || (h["server"] != nil) != c.server {
			t.Errorf("%s: health %v", c.line, h)
		}
		if c.line == Queen015 && h["version"] != "1.0.0" {
			t.Errorf("0.x says version %v", h["version"])
		}
		if status, _, _ := call(t, "GET", srv.URL+"/api/v1/resources/kv/namespaces", ""); status != c.kv {
			t.Errorf("%s: kv namespaces %d, want %d", c.line, status, c.kv)
		}
	}
}

// The move: one row leaves, its copy is dlq:<row id>; the other group's
// row of the same message stays; a second move is gone; a frame already
// there under that id is a duplicate that keeps the row.
func TestMoveVerdicts(t *testing.T) {
	for _, l := range []Line{Queen16, Queen22} {
		t.Run(l.String(), func(t *testing.T) {
			b, srv := lineBroker(t, l)
			var billing1, shipping1, m2 map[string]any
			for _, r := range rowsOf(t, srv.URL) {
				switch {
				case r["transactionId"] == "m1" && r["consumerGroup"] == "billing":
					billing1 = r
				case r["transactionId"] == "m1":
					shipping1 = r
				default:
					m2 = r
				}
			}
			id := billing1["id"].(string)
			status, v, _ := call(t, "POST", srv.URL+"/api/v1/dlq/"+id+"/replay", "")
			if status != 200 || v["result"] != "moved" || v["dlqRowRemoved"] != true {
				t.Fatalf("move: %d %v", status, v)
			}
			as := v["replayedAs"].(map[string]any)
			if as["transaction_id"] != "dlq:"+id || v["consumerGroup"] != "billing" || v["originalTransactionId"] != "m1" {
				t.Fatalf("verdict %v", v)
			}
			left := rowsOf(t, srv.URL)
			if len(left) != 2 {
				t.Fatalf("%d rows left, want 2 (shipping's row of m1 stays)", len(left))
			}
			live := b.LiveMessages()
			if len(live) != 1 || live[0].TransactionID != "dlq:"+id || string(live[0].Payload) != `{"n":1}` {
				t.Fatalf("live %+v", live)
			}
			status, v, _ = call(t, "POST", srv.URL+"/api/v1/dlq/"+id+"/replay", "")
			if status != 404 || v["result"] != "gone" {
				t.Fatalf("second move: %d %v", status, v)
			}
			// A frame pushed under the row's move id makes its move a
			// duplicate: nothing written, the row kept.
			sid := shipping1["id"].(string)
			push := `{"items":[{"queue":"orders","partition":"p1","payload":{"n":1},"transactionId":"dlq:` + sid + `"}]}`
			if status, _, _ := call(t, "POST", srv.URL+"/api/v1/push", push); status != 201 {
				t.Fatalf("push: %d", status)
			}
			status, v, _ = call(t, "POST", srv.URL+"/api/v1/dlq/"+sid+"/replay", "")
			if status != 200 || v["result"] != "duplicate" || v["dlqRowRemoved"] != false || v["replayedAs"].(map[string]any)["message_id"] != zeroUUID {
				t.Fatalf("duplicate: %d %v", status, v)
			}
			if len(rowsOf(t, srv.URL)) != 2 {
				t.Fatal("a duplicate removed its row")
			}
			// A destination: both halves; a blank one is refused.
			if status, _, _ := call(t, "POST", srv.URL+"/api/v1/dlq/"+m2["id"].(string)+"/replay", `{"queue":"  "}`); status != 400 {
				t.Fatalf("blank queue override: %d", status)
			}
			status, v, _ = call(t, "POST", srv.URL+"/api/v1/dlq/"+m2["id"].(string)+"/replay", `{"queue":"orders-recovery","partition":"p2"}`)
			if status != 200 || v["queue"] != "orders-recovery" || v["partition"] != "p2" {
				t.Fatalf("to a recovery queue: %d %v", status, v)
			}
			if got := b.LiveMessages(); got[len(got)-1].Queue != "orders-recovery" {
				t.Fatalf("the copy is in %s", got[len(got)-1].Queue)
			}
		})
	}
}

// DELETE on 1.6 removes every group's rows and keeps the message; a miss
// is a JSON 404. The dedup window is what makes a re-push a duplicate.
func TestDeleteKeepsTheMessageAndDedupIsWindowed(t *testing.T) {
	b, srv := lineBroker(t, Queen16)
	pid := PartitionID("orders", "p1")
	status, v, _ := call(t, "DELETE", srv.URL+"/api/v1/messages/"+pid+"/m1", "")
	if status != 200 || v["success"] != true {
		t.Fatalf("delete: %d %v", status, v)
	}
	if n := len(rowsOf(t, srv.URL)); n != 1 {
		t.Fatalf("%d rows left, want 1 (both of m1's went)", n)
	}
	if status, v, _ := call(t, "DELETE", srv.URL+"/api/v1/messages/"+pid+"/m1", ""); status != 404 || !strings.Contains(v["message"].(string), "No dead-letter row for this address") {
		t.Fatalf("second delete: %d %v", status, v)
	}
	if status, v, _ := call(t, "GET", srv.URL+"/api/v1/messages/"+pid+"/m1", ""); status != 200 || v["status"] == "dead_letter" {
		t.Fatalf("the message after its delete: %d %v", status, v)
	}
	push := func() string {
		_, _, _ = call(t, "POST", srv.URL+"/api/v1/push", `{"items":[{"queue":"orders","partition":"p1","payload":1,"transactionId":"fresh"}]}`)
		return ""
	}
	push()
	push()
	if n := len(b.LiveMessages()); n != 1 {
		t.Fatalf("%d live after two pushes inside the window", n)
	}
	b.SetDedupWindow("orders", 0)
	push()
	if n := len(b.LiveMessages()); n != 2 {
		t.Fatalf("%d live after a push with dedup off", n)
	}
}

// 2.x lists decimal partition ids (any route takes them, or the UUID),
// counts every matching row in total, pages of 1 to 1000, and takes an
// empty consumerGroup= as the group "".
func TestTwoXList(t *testing.T) {
	_, srv := lineBroker(t, Queen22)
	rows := rowsOf(t, srv.URL)
	pid := rows[0]["partitionId"].(string)
	if strings.Contains(pid, "-") || rows[0]["messageId"] == nil || rows[0]["payload"] == nil {
		t.Fatalf("row %v", rows[0])
	}
	if len(rows[0]["failedAt"].(string)) != len("2006-01-02T15:04:05.000000Z") {
		t.Fatalf("failedAt %v: want microseconds", rows[0]["failedAt"])
	}
	_, v, _ := call(t, "GET", srv.URL+"/api/v1/dlq?limit=1", "")
	if v["total"] != float64(3) || len(v["messages"].([]any)) != 1 {
		t.Fatalf("total %v of a page of 1", v["total"])
	}
	_, v, _ = call(t, "GET", srv.URL+"/api/v1/dlq?limit=5000", "")
	if v["pagination"].(map[string]any)["limit"] != float64(1000) {
		t.Fatalf("limit %v: want it clamped to 1000", v["pagination"])
	}
	_, v, _ = call(t, "GET", srv.URL+"/api/v1/dlq?consumerGroup=", "")
	if len(v["messages"].([]any)) != 0 {
		t.Fatal("an empty consumerGroup= matched rows")
	}
	tx := rows[0]["transactionId"].(string)
	if status, v, _ := call(t, "GET", srv.URL+"/api/v1/messages/"+pid+"/"+tx, ""); status != 200 || v["status"] != "dead_letter" {
		t.Fatalf("GET by the decimal id: %d %v", status, v)
	}
}

// The console replays through the move: the rows leave, their copies are
// dlq:<row id>, and dlqctl's later move of one is a 404 gone.
func TestConsoleReplaysAsTheMove(t *testing.T) {
	b, srv := lineBroker(t, Queen16)
	status, v, _ := call(t, "POST", srv.URL+ConsoleReplayPath+"?queue=orders&limit=2", "")
	if status != 200 || v["replayed"] != float64(2) {
		t.Fatalf("console: %d %v", status, v)
	}
	if b.ConsoleMoves() != 2 || len(b.LiveMessages()) != 2 || len(rowsOf(t, srv.URL)) != 1 {
		t.Fatalf("console moved %d, live %d", b.ConsoleMoves(), len(b.LiveMessages()))
	}
	id := v["ids"].([]any)[0].(string)
	if status, v, _ := call(t, "POST", srv.URL+"/api/v1/dlq/"+id+"/replay", ""); status != 404 || v["result"] != "gone" {
		t.Fatalf("a moved row's move: %d %v", status, v)
	}
	// The 1.5 line has no console, and no move.
	_, old := lineBroker(t, Queen15)
	if status, v, _ := call(t, "POST", old.URL+ConsoleReplayPath, ""); status != 404 || v["code"] != "no_such_route" {
		t.Fatalf("1.5 console: %d %v", status, v)
	}
}

// Scripted faults of the move: maintenance and a refusal change nothing;
// an unknown outcome may or may not have applied, as scripted.
func TestMoveFaults(t *testing.T) {
	for _, c := range []struct {
		line    Line
		action  Action
		status  int
		applied bool
	}{
		{Queen16, Maintenance, 503, false},
		{Queen16, FailNotApplied, 500, false},
		{Queen16, UnknownNotApplied, 500, false},
		{Queen16, UnknownAfterApply, 500, true},
		{Queen22, NoLeader, 503, false},
		{Queen22, Refuse409, 409, false},
	} {
		b, srv := lineBroker(t, c.line)
		id := rowsOf(t, srv.URL)[0]["id"].(string)
		b.SetFaults(Faults{Script: func(call Call) Action {
			if call.Route == "POST /api/v1/dlq/{id}/replay" {
				return c.action
			}
			return Serve
		}})
		status, v, h := call(t, "POST", srv.URL+"/api/v1/dlq/"+id+"/replay", "")
		if status != c.status || (len(b.LiveMessages()) == 1) != c.applied {
			t.Errorf("%s %v: %d %v, live %d", c.line, c.action, status, v, len(b.LiveMessages()))
		}
		if (c.action == UnknownAfterApply || c.action == UnknownNotApplied) && v["dlqRowRemoved"] != nil {
			t.Errorf("%v: dlqRowRemoved %v, want null", c.action, v["dlqRowRemoved"])
		}
		if c.action == NoLeader && h.Get("Retry-After") == "" {
			t.Error("no Retry-After with no_leader")
		}
	}
}
