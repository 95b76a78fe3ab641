package replay_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/dlqctl/dlqctl/internal/testkit"
	"github.com/dlqctl/dlqctl/pkg/deadletter"
	"github.com/dlqctl/dlqctl/pkg/replay"
)

// A dry run's snapshot holds the same items as a run's and makes the same
// plan, without the payloads: only the envelopes the plan counts stay.
func TestSnapshotForPlanKeepsOnlyEnvelopes(t *testing.T) {
	b, url := testkit.Sandbox(t)
	b.Fill(3_000, 3)
	c := testkit.Client(t, url)
	ctx := context.Background()
	envelopes := 0
	for _, s := range []deadletter.Selection{{All: true}, {ConsumerGroup: "billing"}} {
		sel := s
		if err := sel.Compile(); err != nil {
			t.Fatal(err)
		}
		full, err := replay.Snapshot(ctx, c, &sel, 500)
		if err != nil {
			t.Fatal(err)
		}
		lean, err := replay.SnapshotForPlan(ctx, c, &sel, 500)
		if err != nil {
			t.Fatal(err)
		}
		if len(full) != len(lean) || len(full) == 0 {
			t.Fatalf("%s: %d items for the plan, %d for a run", sel.String(), len(lean), len(full))
		}
		kept := 0
		for i := range full {
			f, l := full[i], lean[i]
			if f.Address != l.Address || len(f.Rows) != len(l.Rows) || len(f.Others) != len(l.Others) {
				t.Fatalf("item %d differs: %+v, %+v", i, l, f)
			}
			for j := range l.Rows {
				switch env := deadletter.IsEnvelope(f.Rows[j].Data); {
				case env && string(l.Rows[j].Data) != string(f.Rows[j].Data):
					t.Fatalf("%s: envelope not kept", l.Address)
				case env:
					envelopes++
				case len(l.Rows[j].Data) > 0:
					kept++
				}
			}
		}
		if kept > 0 {
			t.Fatalf("%s: %d payloads kept that are not envelopes", sel.String(), kept)
		}
		o := replay.PlanOptions{Action: deadletter.Replay, Rate: 10}
		if a, b := replay.MakePlan(lean, o), replay.MakePlan(full, o); !reflect.DeepEqual(a, b) {
			t.Fatalf("plans differ:\n%+v\n%+v", a, b)
		}
	}
	if envelopes == 0 {
		t.Fatal("the sandbox made no envelopes: nothing was checked for them")
	}
}
