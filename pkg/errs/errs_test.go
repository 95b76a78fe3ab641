package errs_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/dlqctl/dlqctl/pkg/errs"
)

func TestKindSurvivesWrapping(t *testing.T) {
	for _, c := range []struct {
		err  error
		kind errs.Kind
	}{
		{errs.Usagef("no batch %s", "b1"), errs.Usage},
		{fmt.Errorf("replay: %w", errs.NotFoundf("no message %q", "m")), errs.NotFound},
		{fmt.Errorf("a: %w", fmt.Errorf("b: %w", errs.Flagf("invalid --rate"))), errs.Flag},
		{errors.New("plain"), 0},
		{nil, 0},
	} {
		if got := errs.KindOf(c.err); got != c.kind {
			t.Errorf("KindOf(%v) = %d, want %d", c.err, got, c.kind)
		}
	}
	if got := errs.Usagef("no batch %s", "b1").Error(); got != "no batch b1" {
		t.Errorf("the text gained something: %q", got)
	}
}
