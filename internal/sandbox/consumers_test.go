package sandbox

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// The sandbox's consumers take the live messages at their rate, each
// group its own delivery, and fail every Nth delivery again: the detail
// route then says completed, pending (a group has not consumed it) or
// dead_letter, per group.
func TestConsumersConsumeAndFailAgain(t *testing.T) {
	b, srv := lineBroker(t, Queen15)
	for i := range 20 {
		code, _, _ := call(t, "POST", srv.URL+"/api/v1/push", fmt.Sprintf(`{"items":[{"queue":"orders","partition":"p1","transactionId":"c%d","payload":{"n":%d}}]}`, i, i))
		if code >= 300 {
			t.Fatalf("push: %d", code)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.RunConsumers(ctx, Consumers{Rate: 40, FailEvery: 4}); close(done) }()
	time.Sleep(1500 * time.Millisecond)
	cancel()
	<-done
	status := map[string]int{}
	for _, m := range b.LiveMessages() {
		_, v, _ := call(t, "GET", srv.URL+"/api/v1/messages/"+m.PartitionID+"/"+m.TransactionID, "")
		status[v["status"].(string)]++
		for _, g := range v["consumerGroups"].([]any) {
			if g.(map[string]any)["name"] == nil {
				t.Fatalf("consumerGroups %v", v["consumerGroups"])
			}
		}
	}
	// 40 deliveries (20 messages, two groups), every 4th failed: 10
	// messages dead-lettered again, the other 10 completed.
	if status["completed"] != 10 || status["dead_letter"] != 10 {
		t.Fatalf("after the consumers: %v", status)
	}
}
