package cmdutil

import (
	"errors"
	"strings"

	"github.com/spf13/pflag"

	"github.com/dlqctl/dlqctl/pkg/batch"
)

// GivenIn names the settings the command line gave: each setting's flag
// is its name (batch.Given's String).
func GivenIn(fs *pflag.FlagSet) batch.Given {
	var g batch.Given
	fs.Visit(func(fl *pflag.Flag) { g |= batch.GivenNamed(fl.Name) })
	return g
}

// settingFlag is the flag that gives setting s.
func settingFlag(s batch.Given) string { return "--" + s.String() }

// Message is err's text, with a batch setting it refuses named by the
// flag that gives it (batch.SettingError, batch.ChangedError), and a
// hold's end by --until (batch.UntilError), and another broker's batch
// with the flags that reach it (batch.OtherBrokerError).
func Message(err error) string {
	msg := err.Error()
	var se *batch.SettingError
	if errors.As(err, &se) {
		msg = strings.Replace(msg, se.Error(), se.Words(settingFlag(se.Setting)), 1)
	}
	var ce *batch.ChangedError
	if errors.As(err, &ce) {
		msg = strings.Replace(msg, ce.Error(), ce.Words(settingFlag(ce.What)), 1)
	}
	var ue *batch.UntilError
	if errors.As(err, &ue) {
		msg = strings.Replace(msg, ue.Error(), ue.Words("--until"), 1)
	}
	var ob *batch.OtherBrokerError
	if errors.As(err, &ob) {
		msg = strings.Replace(msg, ob.Error(), ob.Words("use --server or --context"), 1)
	}
	return msg
}
