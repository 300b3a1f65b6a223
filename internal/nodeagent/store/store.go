// Package store is the node agent's embedded metadata database (bbolt) under
// its state directory. It holds metadata only — ids, phases, pids, digests,
// deadlines, paths — never terminal bytes or file contents (records are capped
// at MaxRecordBytes to keep it that way). The schema carries an explicit
// version and a migration table; a database written by a newer agent is
// refused, never guessed at. No Kubernetes imports.
package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"sensorium.dev/workbench/internal/actuation"
)

// SchemaVersion is the version this agent writes. migrations[i] upgrades a
// database from version i to i+1; len(migrations) == SchemaVersion.
const SchemaVersion = 1

// Caps.
const (
	FileName           = "workbench-agent.db"
	MaxRecordBytes     = 64 << 10        // store-record-too-large
	MaxKeyBytes        = 512             // store-key-invalid
	MaxList            = 10_000          // List returns at most this many records
	MaxRecoveryRecords = 10_000          // recovery log keeps the newest this many (bounded retention)
	LockTimeout        = 5 * time.Second // waiting for another process's flock on the file
)

var (
	bucketMeta         = []byte("meta")
	bucketEnvironments = []byte("environments")
	bucketSessions     = []byte("sessions")
	bucketCommands     = []byte("commands")
	bucketCommandKeys  = []byte("command_keys") // namespace\x00idempotencyKey -> command UID
	bucketWaits        = []byte("waits")
	bucketPatches      = []byte("patches")
	bucketTempRoots    = []byte("temp_roots")
	bucketRecovery     = []byte("recovery")
	keySchemaVersion   = []byte("schema_version")
)

// maxRecovery is MaxRecoveryRecords (a variable only so tests can prune small).
var maxRecovery = MaxRecoveryRecords

// migrations[i] upgrades version i to i+1 inside the opening transaction.
var migrations = []func(tx *bolt.Tx) error{
	migrateV1,
}

func migrateV1(tx *bolt.Tx) error {
	for _, b := range [][]byte{bucketEnvironments, bucketSessions, bucketCommands, bucketCommandKeys, bucketWaits, bucketPatches, bucketTempRoots, bucketRecovery} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	return nil
}

// DB is the open metadata store.
type DB struct {
	bolt *bolt.DB
	path string
}

// Open opens (creating if needed) <stateDir>/workbench-agent.db, runs pending
// migrations in one transaction and refuses a newer or unreadable schema.
func Open(stateDir string) (*DB, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("store: create state dir %q: %w", stateDir, err)
	}
	path := filepath.Join(stateDir, FileName)
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: LockTimeout, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return nil, fmt.Errorf("store: open %q: %w", path, err)
	}
	db := &DB{bolt: bdb, path: path}
	if err := bdb.Update(db.migrate); err != nil {
		_ = bdb.Close()
		return nil, err
	}
	return db, nil
}

func (db *DB) migrate(tx *bolt.Tx) error {
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return fmt.Errorf("store: %s: %w", db.path, err)
	}
	latest := len(migrations)
	v := 0
	if raw := meta.Get(keySchemaVersion); raw != nil {
		v, err = strconv.Atoi(string(raw))
		if err != nil || v < 1 {
			return actuation.Refusef(actuation.CodeStoreSchemaInvalid, "%s: schema version %q is not a positive integer", db.path, raw)
		}
	} else {
		// No version: only an empty (fresh) database is acceptable.
		nonMeta := 0
		_ = tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			if !bytes.Equal(name, bucketMeta) {
				nonMeta++
			}
			return nil
		})
		if nonMeta > 0 {
			return actuation.Refusef(actuation.CodeStoreSchemaInvalid, "%s: %d bucket(s) but no schema version", db.path, nonMeta)
		}
	}
	if v > latest {
		return actuation.Refusef(actuation.CodeStoreSchemaNewer, "%s: schema version %d is newer than this agent's %d; refusing to open", db.path, v, latest)
	}
	for ; v < latest; v++ {
		if err := migrations[v](tx); err != nil {
			return fmt.Errorf("store: %s: migrate %d -> %d: %w", db.path, v, v+1, err)
		}
	}
	return meta.Put(keySchemaVersion, []byte(strconv.Itoa(latest)))
}

// Path is the database file path.
func (db *DB) Path() string { return db.path }

// Close closes the database.
func (db *DB) Close() error { return db.bolt.Close() }

// Version reads the stored schema version.
func (db *DB) Version() (int, error) {
	var v int
	err := db.bolt.View(func(tx *bolt.Tx) error {
		var err error
		v, err = strconv.Atoi(string(tx.Bucket(bucketMeta).Get(keySchemaVersion)))
		return err
	})
	return v, err
}

// ---- typed tables ----

// Table is a typed view of one bucket with JSON values.
type Table[T any] struct {
	db       *DB
	bucket   []byte
	key      func(*T) string
	onPut    func(*bolt.Tx, *T) error     // secondary-index maintenance
	onDelete func(*bolt.Tx, string) error // secondary-index maintenance
}

func checkKey(k string) error {
	if k == "" || len(k) > MaxKeyBytes {
		return actuation.Refusef(actuation.CodeStoreKeyInvalid, "key of %d bytes (must be 1..%d)", len(k), MaxKeyBytes)
	}
	return nil
}

func encode[T any](v *T) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxRecordBytes {
		return nil, actuation.Refusef(actuation.CodeStoreRecordTooLarge, "record of %d bytes above %d: the store holds metadata only", len(b), MaxRecordBytes)
	}
	return b, nil
}

func putTx[T any](tx *bolt.Tx, bucket []byte, key string, v *T) error {
	if err := checkKey(key); err != nil {
		return err
	}
	b, err := encode(v)
	if err != nil {
		return err
	}
	return tx.Bucket(bucket).Put([]byte(key), b)
}

func getTx[T any](tx *bolt.Tx, bucket []byte, key string) (T, bool, error) {
	var v T
	raw := tx.Bucket(bucket).Get([]byte(key))
	if raw == nil {
		return v, false, nil
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, false, fmt.Errorf("decode %s/%s: %w", bucket, key, err)
	}
	return v, true, nil
}

// Put inserts or replaces the record under its key.
func (t Table[T]) Put(v T) error {
	k := t.key(&v)
	return t.wrap("put", k, t.db.bolt.Update(func(tx *bolt.Tx) error {
		if t.onPut != nil {
			if err := t.onPut(tx, &v); err != nil {
				return err
			}
		}
		return putTx(tx, t.bucket, k, &v)
	}))
}

// Replace removes the record under old and puts v under its own key in one transaction
// (one fsync): a crash leaves either both records as they were or the new one alone.
func (t Table[T]) Replace(old string, v T) error {
	k := t.key(&v)
	return t.wrap("replace", old+" by "+k, t.db.bolt.Update(func(tx *bolt.Tx) error {
		if old != k {
			if t.onDelete != nil {
				if err := t.onDelete(tx, old); err != nil {
					return err
				}
			}
			if err := tx.Bucket(t.bucket).Delete([]byte(old)); err != nil {
				return err
			}
		}
		if t.onPut != nil {
			if err := t.onPut(tx, &v); err != nil {
				return err
			}
		}
		return putTx(tx, t.bucket, k, &v)
	}))
}

// Get returns the record under key and whether it exists.
func (t Table[T]) Get(key string) (T, bool, error) {
	var (
		v  T
		ok bool
	)
	err := t.db.bolt.View(func(tx *bolt.Tx) error {
		var err error
		v, ok, err = getTx[T](tx, t.bucket, key)
		return err
	})
	return v, ok, t.wrap("get", key, err)
}

// Delete removes the record under key (missing is not an error).
func (t Table[T]) Delete(key string) error {
	return t.wrap("delete", key, t.db.bolt.Update(func(tx *bolt.Tx) error {
		if t.onDelete != nil {
			if err := t.onDelete(tx, key); err != nil {
				return err
			}
		}
		return tx.Bucket(t.bucket).Delete([]byte(key))
	}))
}

// List returns up to limit records (limit <= 0 or above MaxList means MaxList)
// in key order.
func (t Table[T]) List(limit int) ([]T, error) {
	if limit <= 0 || limit > MaxList {
		limit = MaxList
	}
	var out []T
	err := t.db.bolt.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(t.bucket).Cursor()
		for k, raw := c.First(); k != nil && len(out) < limit; k, raw = c.Next() {
			var v T
			if err := json.Unmarshal(raw, &v); err != nil {
				return fmt.Errorf("decode %s/%s: %w", t.bucket, k, err)
			}
			out = append(out, v)
		}
		return nil
	})
	return out, t.wrap("list", "", err)
}

func (t Table[T]) wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("store: %s %s/%s in %s: %w", op, t.bucket, key, t.db.path, err)
}

// Environments is keyed by Environment UID.
func (db *DB) Environments() Table[Environment] {
	return Table[Environment]{db: db, bucket: bucketEnvironments, key: func(v *Environment) string { return v.UID }}
}

// Sessions is keyed by TerminalSession UID.
func (db *DB) Sessions() Table[Session] {
	return Table[Session]{db: db, bucket: bucketSessions, key: func(v *Session) string { return v.UID }}
}

// Commands is keyed by TerminalCommand UID. Put maintains the idempotency-key
// index; use RecordCommandStart to admit a new command.
func (db *DB) Commands() Table[Command] {
	return Table[Command]{db: db, bucket: bucketCommands, key: func(v *Command) string { return v.UID }, onPut: indexCommand, onDelete: unindexCommand}
}

// Waits is keyed by Wait UID.
func (db *DB) Waits() Table[Wait] {
	return Table[Wait]{db: db, bucket: bucketWaits, key: func(v *Wait) string { return v.UID }}
}

// Patches is keyed by FilePatch UID.
func (db *DB) Patches() Table[Patch] {
	return Table[Patch]{db: db, bucket: bucketPatches, key: func(v *Patch) string { return v.UID }}
}

// TempRoots is keyed by path.
func (db *DB) TempRoots() Table[TempRoot] {
	return Table[TempRoot]{db: db, bucket: bucketTempRoots, key: func(v *TempRoot) string { return v.Path }}
}

// Recoveries is keyed by the zero-padded sequence ID assigned by AppendRecovery
// (so List is oldest first). Use AppendRecovery to add.
func (db *DB) Recoveries() Table[Recovery] {
	return Table[Recovery]{db: db, bucket: bucketRecovery, key: func(v *Recovery) string { return v.ID }}
}

func idemKey(ns, key string) []byte { return []byte(ns + "\x00" + key) }

func unindexCommand(tx *bolt.Tx, uid string) error {
	c, ok, err := getTx[Command](tx, bucketCommands, uid)
	if err != nil || !ok || c.IdempotencyKey == "" {
		return err
	}
	ik := idemKey(c.Namespace, c.IdempotencyKey)
	if string(tx.Bucket(bucketCommandKeys).Get(ik)) == uid {
		return tx.Bucket(bucketCommandKeys).Delete(ik)
	}
	return nil
}

func indexCommand(tx *bolt.Tx, c *Command) error {
	if c.IdempotencyKey == "" {
		return nil
	}
	ik := idemKey(c.Namespace, c.IdempotencyKey)
	if len(ik) > MaxKeyBytes {
		return actuation.Refusef(actuation.CodeStoreKeyInvalid, "idempotency key of %d bytes above %d", len(ik), MaxKeyBytes)
	}
	idx := tx.Bucket(bucketCommandKeys)
	if owner := idx.Get(ik); owner != nil && string(owner) != c.UID {
		return actuation.Refusef(actuation.CodeIdempotencyConflict, "idempotency key %q in %q already belongs to command %s", c.IdempotencyKey, c.Namespace, owner)
	}
	return idx.Put(ik, []byte(c.UID))
}

// RecordCommandStart admits a command exactly once. If a record with the same
// UID exists — or another command in the namespace already holds the same
// idempotency key for the same argv and session — the existing record is returned
// with created=false and the caller must NOT start a process: re-reconciling never
// runs a command twice. The same key held by a command with another argv digest or
// session is refused with idempotency-conflict.
// Otherwise c is stored (Phase defaults to "Starting", CreatedAt to now) and
// returned with created=true.
func (db *DB) RecordCommandStart(c Command) (rec Command, created bool, err error) {
	if err := checkKey(c.UID); err != nil {
		return Command{}, false, err
	}
	err = db.bolt.Update(func(tx *bolt.Tx) error {
		if existing, ok, err := getTx[Command](tx, bucketCommands, c.UID); err != nil || ok {
			rec = existing
			return err
		}
		if c.IdempotencyKey != "" {
			if owner := tx.Bucket(bucketCommandKeys).Get(idemKey(c.Namespace, c.IdempotencyKey)); owner != nil {
				existing, ok, err := getTx[Command](tx, bucketCommands, string(owner))
				if err != nil {
					return err
				}
				if ok {
					if existing.ArgvDigest != c.ArgvDigest || existing.SessionUID != c.SessionUID {
						// The same key for another intent is a conflict, never a replay of
						// the other command's outcome.
						return actuation.Refusef(actuation.CodeIdempotencyConflict, "idempotency key %q in %q belongs to command %s, which has another argv or session",
							c.IdempotencyKey, c.Namespace, existing.Name)
					}
					rec = existing
					return nil
				}
			}
		}
		if c.Phase == "" {
			c.Phase = PhaseStarting
		}
		if c.CreatedAt.IsZero() {
			c.CreatedAt = time.Now().UTC()
		}
		c.UpdatedAt = c.CreatedAt
		if err := indexCommand(tx, &c); err != nil {
			return err
		}
		if err := putTx(tx, bucketCommands, c.UID, &c); err != nil {
			return err
		}
		rec, created = c, true
		return nil
	})
	if err != nil {
		return Command{}, false, fmt.Errorf("store: record command start %s in %s: %w", c.UID, db.path, err)
	}
	return rec, created, nil
}

// AppendRecovery appends a recovery fact (ID and, if zero, Time assigned) and
// prunes the oldest beyond MaxRecoveryRecords.
func (db *DB) AppendRecovery(r Recovery) (Recovery, error) {
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		var err error
		r, err = appendRecoveryTx(tx, r)
		return err
	})
	if err != nil {
		return Recovery{}, fmt.Errorf("store: append recovery in %s: %w", db.path, err)
	}
	return r, nil
}

func appendRecoveryTx(tx *bolt.Tx, r Recovery) (Recovery, error) {
	b := tx.Bucket(bucketRecovery)
	seq, err := b.NextSequence()
	if err != nil {
		return r, err
	}
	r.ID = fmt.Sprintf("%020d", seq)
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	if err := putTx(tx, bucketRecovery, r.ID, &r); err != nil {
		return r, err
	}
	// IDs are dense sequence numbers: everything below seq-Max+1 is pruned.
	if max := uint64(maxRecovery); seq > max {
		oldestKept := fmt.Sprintf("%020d", seq-max+1)
		c := b.Cursor()
		for k, _ := c.First(); k != nil && string(k) < oldestKept; k, _ = c.First() {
			if err := b.Delete(k); err != nil {
				return r, err
			}
		}
	}
	return r, nil
}

// ClaimEnvironment puts rec, in one transaction, only if check accepts the records of every
// other environment as they are in that transaction: bbolt serializes writers, so two
// environments claiming overlapping host directories at once cannot both pass (the node's
// host-root tenancy, actuation.CheckHostTenancy). check's error is returned unwrapped and
// nothing is written.
func (db *DB) ClaimEnvironment(rec Environment, check func(others []Environment) error) error {
	t := db.Environments()
	k := t.key(&rec)
	var refused error
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		var others []Environment
		c := tx.Bucket(t.bucket).Cursor()
		for key, raw := c.First(); key != nil; key, raw = c.Next() {
			if string(key) == k {
				continue
			}
			var v Environment
			if err := json.Unmarshal(raw, &v); err != nil {
				return fmt.Errorf("decode %s/%s: %w", t.bucket, key, err)
			}
			others = append(others, v)
		}
		if refused = check(others); refused != nil {
			return refused
		}
		return putTx(tx, t.bucket, k, &rec)
	})
	if refused != nil {
		return refused
	}
	return t.wrap("claim", k, err)
}
