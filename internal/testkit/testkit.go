// Package testkit sets up what dlqctl's tests share: a sandbox broker on
// a loopback port, and ledgers on every engine the machine has.
package testkit

import (
	"context"
	"database/sql"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlqctl/dlqctl"
	"github.com/dlqctl/dlqctl/internal/sandbox"
	"github.com/dlqctl/dlqctl/pkg/client"
	"github.com/dlqctl/dlqctl/pkg/ledger"
)

// Now is the fixed clock of the tests and the golden files.
var Now = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

// PostgresEnv names the PostgreSQL server the ledger tests use, as a DSN
// (postgres://user@127.0.0.1:5432/db). In CI it must be set: a skipped
// PostgreSQL test is a failure there.
const PostgresEnv = "DLQCTL_TEST_POSTGRES"

// Sandbox starts a sandbox broker on 127.0.0.1 for the test.
func Sandbox(t testing.TB) (*sandbox.Broker, string) {
	t.Helper()
	b := sandbox.New(nil)
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(srv.Close)
	return b, srv.URL
}

// Seeded is a sandbox whose clock stands at now, loaded with the
// default seed (testdata/sandbox.json) and then changed by more (a
// release line, extra dead letters) before it serves on a loopback port.
func Seeded(t testing.TB, now time.Time, more ...func(*sandbox.Broker)) (*sandbox.Broker, string) {
	t.Helper()
	b := sandbox.New(func() time.Time { return now })
	if err := b.Load(dlqctl.SandboxSeed); err != nil {
		t.Fatal(err)
	}
	for _, m := range more {
		m(b)
	}
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(srv.Close)
	return b, srv.URL
}

// Client returns a client for url with fast retries.
func Client(t testing.TB, server string) *client.Client {
	t.Helper()
	c, err := client.New(client.Options{Server: server, Backoff: 1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Ledger is one engine's DSN for a test.
type Ledger struct {
	Name string
	DSN  string
}

var schemaSeq atomic.Int64

// Ledgers returns a fresh SQLite ledger and, when PostgreSQL is
// configured, a fresh schema on it. Without PostgreSQL the test gets a
// skipped "postgres" subtest (go test -v shows --- SKIP), and fails in CI.
func Ledgers(t testing.TB) []Ledger {
	t.Helper()
	out := []Ledger{{Name: "sqlite", DSN: "sqlite://" + filepath.Join(t.TempDir(), "ledger.db")}}
	if base := postgresBase(t); base != "" {
		out = append(out, Ledger{Name: "postgres", DSN: freshSchema(t, base)})
	} else if tt, ok := t.(*testing.T); ok {
		tt.Run("postgres", func(t *testing.T) { t.Skip(skipPostgres) })
	} else {
		t.Log(skipPostgres)
	}
	return out
}

const skipPostgres = PostgresEnv + " not set: PostgreSQL part skipped"

// PostgresDSN returns a DSN on a fresh schema; without PostgreSQL the
// test is skipped (a failure in CI).
func PostgresDSN(t testing.TB) string {
	t.Helper()
	base := postgresBase(t)
	if base == "" {
		t.Skip(skipPostgres)
	}
	return freshSchema(t, base)
}

// postgresBase is the configured server's DSN, "" when there is none
// (CI must have one).
func postgresBase(t testing.TB) string {
	t.Helper()
	base := os.Getenv(PostgresEnv)
	if base == "" && os.Getenv("CI") != "" {
		t.Fatalf("%s is not set: CI must run the ledger tests on PostgreSQL", PostgresEnv)
	}
	return base
}

// freshSchema makes a schema of its own for the test on base.
func freshSchema(t testing.TB, base string) string {
	t.Helper()
	schema := fmt.Sprintf("t_%d_%d", os.Getpid(), schemaSeq.Add(1))
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatalf("creating schema on %s: %v", PostgresEnv, err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("pgx", base)
		if err == nil {
			_, _ = db.Exec("DROP SCHEMA " + schema + " CASCADE")
			db.Close()
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// OpenLedger opens a ledger and closes it when the test ends.
func OpenLedger(t testing.TB, dsn string) *ledger.Store {
	t.Helper()
	s, err := ledger.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// ForEachLedger runs f as a subtest on every engine.
func ForEachLedger(t *testing.T, f func(t *testing.T, s *ledger.Store, dsn string)) {
	for _, l := range Ledgers(t) {
		t.Run(l.Name, func(t *testing.T) {
			f(t, OpenLedger(t, l.DSN), l.DSN)
		})
	}
}

// Concurrently calls each on every item, workers at a time, and returns
// when all are done: the benchmarks' bare loops (what a replay's broker
// calls cost with nothing recorded).
func Concurrently[T any](workers int, items []T, each func(T)) {
	feed := make(chan T)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range feed {
				each(it)
			}
		}()
	}
	for _, it := range items {
		feed <- it
	}
	close(feed)
	wg.Wait()
}

// PostgresRoles returns, for each role named, a DSN that logs in as that
// role on one fresh schema whose ledger is already made: each role may
// read and write its tables, as the people of a team sharing a ledger
// do. Under Owner, the DSN of the role that made the ledger. Roles are made if missing (they are the server's, not the
// schema's) and log in without a password, as the test server trusts
// loopback; without PostgreSQL the test is skipped (a failure in CI).
func PostgresRoles(t testing.TB, roles ...string) map[string]string {
	t.Helper()
	dsn := PostgresDSN(t)
	OpenLedger(t, dsn) // the schema, made by the server's own user
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string]string{}
	for _, role := range roles {
		for _, q := range []string{
			`DO $$ BEGIN CREATE ROLE ` + role + ` LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`,
			`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + role,
			`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ` + schema + ` TO ` + role,
			`GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA ` + schema + ` TO ` + role,
		} {
			if _, err := db.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		as := *u
		as.User = url.User(role)
		out[role] = as.String()
	}
	out[Owner] = dsn
	return out
}

// Owner is PostgresRoles' key for the role that owns the ledger.
const Owner = "owner"
