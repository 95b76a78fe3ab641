package deadletter_test

import (
	"slices"
	"testing"

	"github.com/dlqctl/dlqctl/pkg/deadletter"
)

// Which recorded batches each command runs by --batch: its own action's,
// and a restore a discard's too; never a hold's, which is not executed.
func TestBatchesRun(t *testing.T) {
	for _, c := range []struct {
		act  *deadletter.Action
		want []string
	}{
		{deadletter.ActReplay, []string{deadletter.Replay}},
		{deadletter.ActDiscard, []string{deadletter.Discard}},
		{deadletter.ActRestore, []string{deadletter.Discard, deadletter.Restore}},
		{deadletter.ActImport, []string{deadletter.Import}},
	} {
		if got := c.act.BatchesRun(); !slices.Equal(got, c.want) {
			t.Errorf("%s runs the batches of %v, want %v", c.act.Name, got, c.want)
		}
		if c.act.Runs("hold") {
			t.Errorf("%s runs a hold", c.act.Name)
		}
	}
}
