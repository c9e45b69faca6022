// Package sqlstore is a sluice store over database/sql and SQLite, written
// as a store outside the sluice module would be: it knows no algorithm.
// Each op is one transaction that loads the states the op names
// (store.Keys), decides it with store.Apply, and saves the states that
// changed, deleting those that are fresh again.
//
// It keeps one table:
//
//	CREATE TABLE sluice_states (
//		key      TEXT PRIMARY KEY, -- store.Key.String(): "r:" or "h:" and the key
//		state    BLOB NOT NULL,    -- store.State.MarshalBinary()
//		fresh_at INTEGER NOT NULL  -- store.State.FreshAt(): µs since the epoch
//	)
//
// A row whose fresh_at has passed is equivalent to no row: Sweep deletes
// them. The driver is modernc.org/sqlite (pure Go); a transaction begins
// IMMEDIATE, so that two processes sharing the file never both decide on
// what they read.
//
// It decides about 4,000 takes a second from one goroutine on a shared
// two-core machine (BenchmarkTake, 250µs an op): the commit each op pays
// on a database file, not the decision, sets the pace.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/sluice-go/sluice/store"
	_ "modernc.org/sqlite" // the "sqlite" driver
)

// Store is a store.Store over an SQLite database. It is safe for
// concurrent use, by goroutines and by processes sharing the file.
type Store struct {
	db               *sql.DB
	load, save, drop *sql.Stmt
	now              func() int64
}

var _ store.Store = (*Store)(nil)

const schema = `CREATE TABLE IF NOT EXISTS sluice_states (
	key TEXT PRIMARY KEY,
	state BLOB NOT NULL,
	fresh_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS sluice_states_fresh_at ON sluice_states (fresh_at)`

// Open opens the SQLite database at path, creating it and its table if
// need be. Ops whose At is 0 are decided at the system's clock.
func Open(path string) (*Store, error) {
	q := url.Values{}
	q.Set("_txlock", "immediate")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, now: func() int64 { return time.Now().UnixMicro() }}
	if err := s.prepare(); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlstore: %s: %w", path, err)
	}
	return s, nil
}

// prepare creates the table and prepares the statements.
func (s *Store) prepare() error {
	if _, err := s.db.Exec(schema); err != nil {
		return err
	}
	var err error
	stmt := func(q string) *sql.Stmt {
		st, e := s.db.Prepare(q)
		err = errors.Join(err, e)
		return st
	}
	s.load = stmt(`SELECT state FROM sluice_states WHERE key = ?`)
	s.save = stmt(`INSERT INTO sluice_states (key, state, fresh_at) VALUES (?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET state = excluded.state, fresh_at = excluded.fresh_at`)
	s.drop = stmt(`DELETE FROM sluice_states WHERE key = ?`)
	return err
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Run decides each op in its own transaction, in order. An op the
// database failed has an Err wrapping store.ErrStoreUnavailable and
// changed nothing.
func (s *Store) Run(ctx context.Context, ops []store.Op) {
	for i := range ops {
		if err := s.run(ctx, &ops[i]); err != nil {
			op := &ops[i]
			op.Decision, op.Expiry = store.Decision{}, 0
			for j := range op.Parts {
				op.Parts[j].Decision = store.Decision{}
			}
			op.Err = fmt.Errorf("%w: %w", store.ErrStoreUnavailable, err)
		}
	}
}

// run decides op in one transaction: load, store.Apply, save. An error
// of its own (an invalid time, say) is op's Err and saves nothing.
func (s *Store) run(ctx context.Context, op *store.Op) error {
	now := op.At
	if now == 0 {
		now = s.now()
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // after Commit, sql.ErrTxDone: nothing to undo
	keys := store.Keys(op)
	states := make([]store.State, len(keys))
	had := make([]bool, len(keys))
	for i, k := range keys {
		if had[i], err = loadState(ctx, tx.StmtContext(ctx, s.load), k.String(), &states[i]); err != nil {
			return err
		}
	}
	if store.Apply(op, now, states); op.Err != nil {
		return nil
	}
	for i, k := range keys {
		st := &states[i]
		switch {
		case st.FreshAt() <= now && had[i]:
			_, err = tx.StmtContext(ctx, s.drop).ExecContext(ctx, k.String())
		case st.FreshAt() > now && st.Changed():
			var b []byte
			if b, err = st.MarshalBinary(); err == nil {
				_, err = tx.StmtContext(ctx, s.save).ExecContext(ctx, k.String(), b, st.FreshAt())
			}
		}
		if err != nil {
			return err
		}
	}
	return tx.Commit()
}

// loadState reads the state of key into st, and reports whether it had
// a row.
func loadState(ctx context.Context, load *sql.Stmt, key string, st *store.State) (bool, error) {
	var b []byte
	switch err := load.QueryRowContext(ctx, key).Scan(&b); {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, st.UnmarshalBinary(b)
}

// Sweep deletes the rows that are fresh at now (µs since the epoch):
// those no decision needs. It returns how many it deleted. Call it now
// and then (a ticker), so that one-off keys do not pile up.
func (s *Store) Sweep(ctx context.Context, now int64) (int64, error) {
	r, err := s.db.ExecContext(ctx, `DELETE FROM sluice_states WHERE fresh_at <= ?`, now)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}
