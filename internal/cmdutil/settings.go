package cmdutil

import (
	"errors"
	"strings"

	"github.com/spf13/pflag"

	"github.com/dlqctl/dlqctl/pkg/batch"
)

// settingFlags are the flags that give a batch's settings.
var settingFlags = map[string]batch.Given{
	"rate": batch.GivenRate, "burst": batch.GivenBurst, "concurrency": batch.GivenConcurrency, "via": batch.GivenVia,
	"to-queue": batch.GivenToQueue, "to-partition": batch.GivenToPartition, "transform": batch.GivenTransform,
	"max-generation": batch.GivenMaxGeneration, "max-failures": batch.GivenMaxFailures, "max-refailures": batch.GivenMaxRefailures,
	"order": batch.GivenOrder, "max-lag": batch.GivenMaxLag, "window": batch.GivenWindow, "no-trace": batch.GivenNoTrace,
}

// GivenIn names the settings the command line gave.
func GivenIn(fs *pflag.FlagSet) batch.Given {
	var g batch.Given
	fs.Visit(func(fl *pflag.Flag) { g |= settingFlags[fl.Name] })
	return g
}

// settingFlag is the flag that gives setting s.
func settingFlag(s batch.Given) string {
	for name, g := range settingFlags {
		if g == s {
			return "--" + name
		}
	}
	return s.String()
}

// Message is err's text, with a batch setting it refuses named by the
// flag that gives it (batch.SettingError, batch.ChangedError).
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
	return msg
}
