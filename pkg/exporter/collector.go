package exporter

import (
	"runtime"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/pkg/gate"
	"github.com/dlqctl/dlqctl/pkg/ledger"
	"github.com/prometheus/client_golang/prometheus"
)

// fromLastPass ends the HELP of every value a pass computes: scrapes
// read the last pass, they never reach the broker.
const fromLastPass = " From the exporter's last successful pass, not computed at scrape time."

var scopeLabels = []string{"queue", "consumer_group", "owner"}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// The metrics, by name. Names follow the Prometheus naming practices:
// the dlqctl_ prefix, base units, timestamps as _timestamp_seconds,
// _total on counters only.
var (
	descOldest = desc("dlqctl_dlq_oldest_failed_timestamp_seconds",
		"When the oldest dead letter of the scope failed, as a Unix time: time() minus it is its age. Absent when the scope has no dead letter."+fromLastPass, scopeLabels...)
	descOldestUnheld = desc("dlqctl_dlq_oldest_unheld_failed_timestamp_seconds",
		"When the oldest dead letter not under an active hold failed, as a Unix time: what max-age is judged on. Absent when there is none."+fromLastPass, scopeLabels...)
	descDepth     = desc("dlqctl_dlq_depth", "Dead-letter rows of the scope."+fromLastPass, scopeLabels...)
	descUndecided = desc("dlqctl_dlq_undecided_past_slo",
		"Dead letters older than the triage SLO with no decision, or with a replay or discard decision not carried out within it (dlqctl_dlq_decided_not_carried_out of them). Absent when the scope has no triage SLO."+fromLastPass, scopeLabels...)
	descNotCarriedOut = desc("dlqctl_dlq_decided_not_carried_out",
		"Dead letters under a replay or discard decision that was not carried out within the triage SLO."+fromLastPass, scopeLabels...)
	descVanished = desc("dlqctl_dlq_vanished_undecided",
		"Dead letters that left the broker with no recorded decision (seen by dlq sync, or by the exporter's --sync)."+fromLastPass, scopeLabels...)
	descBreach = desc("dlqctl_dlq_breach", "1 when the scope breaches its thresholds, exactly as dlq check judges it; 0 otherwise."+fromLastPass, scopeLabels...)
	descMaxAge = desc("dlqctl_policy_max_age_seconds",
		"The scope's max-age threshold; 0 for a queue with no policy, which is held to max-age 0. Absent when only a triage SLO is set.", scopeLabels...)
	descSLO = desc("dlqctl_policy_triage_slo_seconds", "The scope's triage SLO. Absent when none is set.", scopeLabels...)

	descClass = desc("dlqctl_dlq_class_depth",
		"Dead-letter rows per queue and failure class: the classes with the most rows one by one (--max-classes), the rest summed as class=\"other\". Known only from a pass that read every row (a broker that answers in one body, or --sync)."+fromLastPass,
		"queue", "class", "pattern")

	batchLabels    = []string{"batch_id", "action"}
	descBatchSize  = desc("dlqctl_batch_size", "Addresses in a replay or discard batch that is running or interrupted.", batchLabels...)
	descBatchState = desc("dlqctl_batch_messages",
		"Addresses of a running or interrupted batch by state: done (published or removed), failed (refused, or outcome unknown), skipped, pending."+fromLastPass,
		append(batchLabels, "state")...)
	descBatchRefailed = desc("dlqctl_batch_refailed",
		"Replays of a running or interrupted batch that are back in the DLQ. Known only from a pass that read every row."+fromLastPass, batchLabels...)
	descBatchRate = desc("dlqctl_batch_rate_messages_per_second",
		"A running batch's pace: addresses its run did a second, from its start to its last beat. Absent before the run has done one."+fromLastPass, batchLabels...)
	descBatchEnd = desc("dlqctl_batch_estimated_end_timestamp_seconds",
		"When a running batch would be done at its run's pace, as a Unix time. Absent while the pace is unknown."+fromLastPass, batchLabels...)
	descBatchBeat = desc("dlqctl_batch_last_beat_timestamp_seconds",
		"When a running batch's run last said it was alive (every 2 s while it runs), as a Unix time."+fromLastPass, batchLabels...)

	descBrokerUp    = desc("dlqctl_broker_up", "1 when the latest pass reached the broker, 0 when it could not (the other values are then the last known ones).")
	descLedgerUp    = desc("dlqctl_ledger_up", "1 when the latest pass reached the ledger, 0 when it could not.")
	descLastSuccess = desc("dlqctl_last_pass_success_timestamp_seconds", "When the last successful pass evaluated, as a Unix time. Absent before the first.")
	descLastPass    = desc("dlqctl_last_pass_timestamp_seconds", "When the latest pass, successful or not, evaluated, as a Unix time.")
	descDuration    = desc("dlqctl_last_pass_duration_seconds", "How long the latest pass took.")
	descInterval    = desc("dlqctl_pass_interval_seconds", "The time from one pass's start to the next (--interval).")
	descPasses      = desc("dlqctl_passes_total", "Passes since the exporter started, by result.", "result")
	descRequests    = desc("dlqctl_broker_requests_total", "HTTP requests the exporter's passes made to the broker.")
	descBytes       = desc("dlqctl_broker_received_bytes_total", "Response body bytes the exporter's passes read from the broker.")
	descBuild       = desc("dlqctl_build_info", "Which dlqctl this is; always 1.", "version", "revision", "goversion")
	descScopes      = desc("dlqctl_scopes", "Scopes the last successful pass evaluated, and how many of them breach.", "state")
)

// Describe sends every metric's description.
func (e *Exporter) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descOldest, descOldestUnheld, descDepth, descUndecided, descNotCarriedOut, descVanished,
		descBreach, descMaxAge, descSLO, descClass, descBatchSize, descBatchState, descBatchRefailed, descBatchRate, descBatchEnd, descBatchBeat, descBrokerUp, descLedgerUp,
		descLastSuccess, descLastPass, descDuration, descInterval, descPasses, descRequests, descBytes, descBuild, descScopes} {
		ch <- d
	}
}

// Collect builds the metrics from the current snapshot; it does no I/O.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	s := e.snap.Load()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(descBrokerUp, b2f(s.BrokerUp))
	gauge(descLedgerUp, b2f(s.LedgerUp))
	if !s.LastSuccess.IsZero() {
		gauge(descLastSuccess, unix(s.LastSuccess))
	}
	if !s.LastPass.IsZero() {
		gauge(descLastPass, unix(s.LastPass))
		gauge(descDuration, s.LastDuration.Seconds())
	}
	gauge(descInterval, e.cfg.Interval.Seconds())
	counter(descPasses, float64(e.passesOK.Load()), "success")
	counter(descPasses, float64(e.passesFailed.Load()), "failure")
	counter(descRequests, float64(e.requests.Load()))
	counter(descBytes, float64(e.bytes.Load()))
	gauge(descBuild, 1, e.cfg.Version, e.cfg.Revision, runtime.Version())
	if s.Check != nil {
		collectCheck(gauge, s.Check)
	}
	for _, c := range s.Classes {
		gauge(descClass, float64(c.Depth), validLabel(c.Queue), c.Class, c.Pattern)
	}
	for _, b := range s.Batches {
		gauge(descBatchSize, float64(b.Size), b.ID, b.Action)
		gauge(descBatchState, float64(b.Done), b.ID, b.Action, "done")
		gauge(descBatchState, float64(b.Failed), b.ID, b.Action, "failed")
		gauge(descBatchState, float64(b.Skipped), b.ID, b.Action, "skipped")
		gauge(descBatchState, float64(b.Pending()), b.ID, b.Action, "pending")
		if b.RefailedKnown {
			gauge(descBatchRefailed, float64(b.Refailed), b.ID, b.Action)
		}
		if b.Rate > 0 {
			gauge(descBatchRate, b.Rate, b.ID, b.Action)
		}
		if !b.EstimatedEnd.IsZero() {
			gauge(descBatchEnd, unix(b.EstimatedEnd), b.ID, b.Action)
		}
		if !b.LastBeat.IsZero() && b.Status == ledger.StatusRunning {
			gauge(descBatchBeat, unix(b.LastBeat), b.ID, b.Action)
		}
	}
}

// collectCheck sends a check's scopes, and how many breach.
func collectCheck(gauge func(*prometheus.Desc, float64, ...string), res *gate.Result) {
	breaching := 0
	for _, sc := range res.Scopes {
		collectScope(gauge, sc)
		if len(sc.Breaches) > 0 {
			breaching++
		}
	}
	gauge(descScopes, float64(len(res.Scopes)), "evaluated")
	gauge(descScopes, float64(breaching), "breaching")
}

// CheckCollector is one dlq check's verdicts as the exporter exports a
// pass's: the same series, names and labels, so a rule reads a textfile
// dlq check --format prometheus wrote as it reads the exporter. With res
// nil (a context that could not be judged), dlqctl_broker_up 0 alone.
func CheckCollector(res *gate.Result, at time.Time) prometheus.Collector {
	return checkCollector{res: res, at: at}
}

type checkCollector struct {
	res *gate.Result
	at  time.Time
}

func (c checkCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descOldest, descOldestUnheld, descDepth, descUndecided, descNotCarriedOut, descVanished,
		descBreach, descMaxAge, descSLO, descBrokerUp, descLedgerUp, descLastSuccess, descScopes} {
		ch <- d
	}
}

func (c checkCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descBrokerUp, b2f(c.res != nil))
	if c.res == nil {
		return
	}
	gauge(descLedgerUp, 1)
	gauge(descLastSuccess, unix(c.at))
	collectCheck(gauge, c.res)
}

func collectScope(gauge func(*prometheus.Desc, float64, ...string), sc gate.Scope) {
	l := []string{validLabel(sc.Queue), validLabel(sc.ConsumerGroup), validLabel(sc.Owner)}
	gauge(descDepth, float64(sc.Depth), l...)
	if !sc.OldestFailedAt.IsZero() {
		gauge(descOldest, unix(sc.OldestFailedAt), l...)
	}
	if !sc.OldestUnheldFailedAt.IsZero() {
		gauge(descOldestUnheld, unix(sc.OldestUnheldFailedAt), l...)
	}
	if sc.TriageSLOSeconds != nil {
		gauge(descSLO, *sc.TriageSLOSeconds, l...)
		gauge(descUndecided, float64(sc.UndecidedPastSLO), l...)
	}
	if sc.MaxAgeSeconds != nil {
		gauge(descMaxAge, *sc.MaxAgeSeconds, l...)
	}
	gauge(descNotCarriedOut, float64(sc.DecidedNotCarriedOut), l...)
	gauge(descVanished, float64(sc.VanishedUndecided), l...)
	gauge(descBreach, b2f(len(sc.Breaches) > 0), l...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unix(t time.Time) float64 { return float64(t.UnixMilli()) / 1000 }

// validLabel is a name as a label value: as the broker spells it, with
// invalid UTF-8 (which a label cannot hold) replaced.
func validLabel(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
