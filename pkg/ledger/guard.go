package ledger

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// On a shared PostgreSQL ledger, four eyes is the database's to keep, not
// each dlqctl's: a person holds the rights docs/configuration.md gives
// (SELECT, INSERT, UPDATE, DELETE on the ledger's tables), and with them
// could otherwise rewrite a batch's author, set an awaiting batch free, or
// write an approval in another's name. The guards below (migration 23)
// are triggers the role that owns the ledger installs; a role that does
// not own it cannot drop or disable them:
//
//   - a batch's author is session_user, written on insert; its identity
//     (action, size, author, who and why, the need for approval) never
//     changes, nor is it deleted;
//   - a batch that needs approval leaves awaiting-approval (other than to
//     cancelled) only once an approval by another role exists; one larger
//     than the ledger's threshold is refused unless it needs approval;
//   - a manifest is written with its batch and never changed: a batch holds
//     at most its size of items (one a position);
//   - an approval's approver is session_user, never the batch's author, and
//     an approval is never changed or removed; nor is an audit line, each
//     stamped with the role that wrote it;
//   - the ledger's threshold (ledger_settings) is changed by its owner only.
//
// The owner itself may change what it likes (it could drop the guards):
// keep that role for migrations and the threshold. SQLite authenticates
// nobody, so none of this is possible there, and approvals say so.

// ErrRefused: the ledger's own rules refused a write (a guard above).
var ErrRefused = errors.New("the ledger refused it")

// guardState is the SQLSTATE the guards raise.
const guardState = "DQ001"

// refused turns a guard's refusal into ErrRefused with its sentence.
func refused(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == guardState {
		return &refusal{msg: pe.Message}
	}
	return nil
}

type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Unwrap() error { return ErrRefused }

// guardSchema is the migration that installed the guards and the
// ledger's settings.
const guardSchema = 23

// installGuards is migration 23's step on PostgreSQL. Every function
// reads the ledger's tables in its own schema, then pg_temp: a session's
// temporary table of the same name is never what a guard reads.
func installGuards(ctx context.Context, s *Store, tx *sql.Tx) error {
	if s.engine != Postgres {
		return nil
	}
	var schema string
	if err := tx.QueryRowContext(ctx, `SELECT quote_ident(current_schema())`).Scan(&schema); err != nil {
		return err
	}
	path := `SET search_path = ` + schema + `, pg_temp`
	raise := func(msg string, args ...string) string {
		return `RAISE EXCEPTION USING ERRCODE = '` + guardState + `', MESSAGE = format('` + msg + `'` + strings.Join(append([]string{""}, args...), ", ") + `);`
	}
	for _, q := range []string{
		`CREATE FUNCTION dlqctl_owns(rel oid) RETURNS boolean LANGUAGE sql STABLE ` + path + ` AS
		$$ SELECT pg_has_role(session_user, (SELECT relowner FROM pg_catalog.pg_class WHERE oid = rel), 'MEMBER') $$`,

		`CREATE FUNCTION dlqctl_guard_batch() RETURNS trigger LANGUAGE plpgsql ` + path + ` AS $$
		DECLARE above integer;
		BEGIN
			IF TG_OP = 'DELETE' THEN
				IF dlqctl_owns(TG_RELID) THEN RETURN OLD; END IF;
				` + raise(`a batch is never deleted (batch %s); cancel it instead`, `OLD.id`) + `
			END IF;
			IF TG_OP = 'INSERT' THEN
				NEW.author := session_user;
				SELECT value::integer INTO above FROM ledger_settings WHERE name = 'approval.min-messages';
				IF NEW.action <> 'hold' AND above > 0 AND NEW.size > above AND NEW.needs_approval = 0 THEN
					` + raise(`this ledger needs a second person''s approval for a batch of more than %s messages; batch %s has %s`, `above`, `NEW.id`, `NEW.size`) + `
				END IF;
			ELSIF NOT dlqctl_owns(TG_RELID) THEN
				IF (NEW.id, NEW.broker, NEW.action, NEW.by_name, NEW.at, NEW.why, NEW.owner, NEW.selection, NEW.size, NEW.destination, NEW.author, NEW.needs_approval)
					IS DISTINCT FROM (OLD.id, OLD.broker, OLD.action, OLD.by_name, OLD.at, OLD.why, OLD.owner, OLD.selection, OLD.size, OLD.destination, OLD.author, OLD.needs_approval)
					OR NEW.until_at IS DISTINCT FROM OLD.until_at THEN
					` + raise(`batch %s: who recorded it, what it does, its size and its need for approval are the ledger''s record, which %s may not change`, `OLD.id`, `session_user`) + `
				END IF;
				IF OLD.status = 'cancelled' AND NEW.status <> 'cancelled' THEN
					` + raise(`batch %s was cancelled; record a new one`, `OLD.id`) + `
				END IF;
			END IF;
			IF NEW.needs_approval <> 0 AND NEW.status NOT IN ('awaiting-approval', 'cancelled')
				AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.batch_id = NEW.id AND a.approver <> NEW.author) THEN
				IF TG_OP = 'UPDATE' AND dlqctl_owns(TG_RELID) THEN RETURN NEW; END IF;
				` + raise(`batch %s awaits approval by someone other than %s`, `NEW.id`, `NEW.author`) + `
			END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER dlqctl_guard_batch BEFORE INSERT OR UPDATE OR DELETE ON batches FOR EACH ROW EXECUTE FUNCTION dlqctl_guard_batch()`,

		`CREATE FUNCTION dlqctl_guard_items() RETURNS trigger LANGUAGE plpgsql ` + path + ` AS $$
		DECLARE bad text;
		BEGIN
			IF TG_OP <> 'INSERT' THEN
				IF dlqctl_owns(TG_RELID) THEN RETURN NULL; END IF;
				` + raise(`a batch''s manifest is never changed (%s)`, `session_user`) + `
			END IF;
			SELECT n.batch_id INTO bad FROM dlqctl_new n JOIN batches b ON b.id = n.batch_id WHERE n.seq < 0 OR n.seq >= b.size LIMIT 1;
			IF bad IS NOT NULL THEN
				` + raise(`batch %s: its manifest holds as many messages as its size, no more`, `bad`) + `
			END IF;
			RETURN NULL;
		END $$`,
		`CREATE TRIGGER dlqctl_guard_items_insert AFTER INSERT ON batch_items REFERENCING NEW TABLE AS dlqctl_new FOR EACH STATEMENT EXECUTE FUNCTION dlqctl_guard_items()`,
		`CREATE TRIGGER dlqctl_guard_items_change BEFORE UPDATE OR DELETE ON batch_items FOR EACH STATEMENT EXECUTE FUNCTION dlqctl_guard_items()`,

		`CREATE FUNCTION dlqctl_guard_approval() RETURNS trigger LANGUAGE plpgsql ` + path + ` AS $$
		DECLARE b batches%ROWTYPE;
		BEGIN
			IF TG_OP <> 'INSERT' THEN
				IF dlqctl_owns(TG_RELID) THEN RETURN COALESCE(NEW, OLD); END IF;
				` + raise(`an approval is never changed or removed (batch %s)`, `OLD.batch_id`) + `
			END IF;
			NEW.approver := session_user;
			NEW.by_name := session_user;
			SELECT * INTO b FROM batches WHERE id = NEW.batch_id;
			IF NOT FOUND OR b.status <> 'awaiting-approval' OR b.needs_approval = 0 THEN
				` + raise(`batch %s does not await approval`, `NEW.batch_id`) + `
			END IF;
			IF b.author = session_user THEN
				` + raise(`%s recorded batch %s: a batch is approved by someone other than its author`, `session_user`, `NEW.batch_id`) + `
			END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER dlqctl_guard_approval BEFORE INSERT OR UPDATE OR DELETE ON approvals FOR EACH ROW EXECUTE FUNCTION dlqctl_guard_approval()`,

		`CREATE FUNCTION dlqctl_guard_audit() RETURNS trigger LANGUAGE plpgsql ` + path + ` AS $$
		BEGIN
			IF TG_OP = 'INSERT' THEN
				NEW.role := session_user;
				RETURN NEW;
			END IF;
			IF dlqctl_owns(TG_RELID) THEN RETURN COALESCE(NEW, OLD); END IF;
			` + raise(`the audit is append-only (%s)`, `session_user`) + `
		END $$`,
		`CREATE TRIGGER dlqctl_guard_audit BEFORE INSERT OR UPDATE OR DELETE ON audit FOR EACH ROW EXECUTE FUNCTION dlqctl_guard_audit()`,

		`CREATE FUNCTION dlqctl_guard_settings() RETURNS trigger LANGUAGE plpgsql ` + path + ` AS $$
		BEGIN
			IF NOT dlqctl_owns(TG_RELID) THEN
				` + raise(`the ledger''s settings are changed by the role that owns the ledger, not %s`, `session_user`) + `
			END IF;
			IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
			NEW.by_role := session_user;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER dlqctl_guard_settings BEFORE INSERT OR UPDATE OR DELETE ON ledger_settings FOR EACH ROW EXECUTE FUNCTION dlqctl_guard_settings()`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}
