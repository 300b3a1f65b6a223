package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/testkit"
)

var must = testkit.Must

var wantCode = testkit.WantCode

func open(t *testing.T, dir string) *DB {
	t.Helper()
	db, err := Open(dir)
	must(t, err)
	return db
}

func TestFreshSchemaAndTables(t *testing.T) {
	if len(migrations) != SchemaVersion {
		t.Fatalf("migration table has %d entries, SchemaVersion %d", len(migrations), SchemaVersion)
	}
	dir := filepath.Join(t.TempDir(), "state")
	db := open(t, dir)
	defer func() { _ = db.Close() }()
	v, err := db.Version()
	must(t, err)
	if v != SchemaVersion {
		t.Fatalf("version %d", v)
	}
	if st, _ := os.Stat(db.Path()); st.Mode().Perm() != 0o600 {
		t.Fatalf("db mode %v", st.Mode())
	}
	now := time.Now().UTC().Truncate(time.Second)
	must(t, db.Environments().Put(Environment{UID: "e1", Namespace: "ns", Name: "env", Backend: "fixture-copy.v1", RootPaths: map[string]string{"repo": "/srv/repo"}, ManagedCopyDir: "/var/lib/wb/copies/fx-1", Phase: "Ready", UpdatedAt: now}))
	must(t, db.Sessions().Put(Session{UID: "s1", Namespace: "ns", Name: "sh", EnvironmentUID: "e1", PID: 10, PGID: 10, StartTime: 1234, Phase: "Running", LastSeq: 7}))
	must(t, db.Waits().Put(Wait{UID: "w1", Phase: "Pending", Deadline: now.Add(time.Minute)}))
	must(t, db.Patches().Put(Patch{UID: "p1", Digest: "sha256:" + strings.Repeat("0", 64), Phase: "Applied", ChangedFiles: []PatchFile{{Path: "a", Op: "modify"}}}))
	must(t, db.TempRoots().Put(TempRoot{Path: "/var/lib/wb/tmp/x", Owner: "environment/e1", CreatedAt: now}))
	env, ok, err := db.Environments().Get("e1")
	must(t, err)
	if !ok || env.RootPaths["repo"] != "/srv/repo" || !env.UpdatedAt.Equal(now) {
		t.Fatalf("env %+v", env)
	}
	ss, err := db.Sessions().List(0)
	must(t, err)
	if len(ss) != 1 || ss[0].StartTime != 1234 || ss[0].LastSeq != 7 {
		t.Fatalf("sessions %+v", ss)
	}
	trs, err := db.TempRoots().List(0)
	must(t, err)
	if len(trs) != 1 || trs[0].Owner != "environment/e1" {
		t.Fatalf("temp roots %+v", trs)
	}
	must(t, db.Waits().Delete("w1"))
	must(t, db.Waits().Delete("w1"))
	if _, ok, _ := db.Waits().Get("w1"); ok {
		t.Fatal("wait not deleted")
	}
	for i := 0; i < 5; i++ {
		must(t, db.Sessions().Put(Session{UID: fmt.Sprintf("s%d", i+2), Phase: "Closed"}))
	}
	ss, _ = db.Sessions().List(3)
	if len(ss) != 3 {
		t.Fatalf("list limit: %d", len(ss))
	}
}

func TestMetadataOnlyCaps(t *testing.T) {
	db := open(t, t.TempDir())
	defer func() { _ = db.Close() }()
	err := db.Environments().Put(Environment{UID: "e", RootPaths: map[string]string{"x": strings.Repeat("y", MaxRecordBytes)}})
	wantCode(t, err, string(actuation.CodeStoreRecordTooLarge))
	wantCode(t, db.Sessions().Put(Session{}), string(actuation.CodeStoreKeyInvalid))
	wantCode(t, db.Sessions().Put(Session{UID: strings.Repeat("u", MaxKeyBytes+1)}), string(actuation.CodeStoreKeyInvalid))
}

func TestRecordCommandStartIsIdempotent(t *testing.T) {
	db := open(t, t.TempDir())
	defer func() { _ = db.Close() }()
	first, created, err := db.RecordCommandStart(Command{UID: "c1", Namespace: "ns", Name: "build", IdempotencyKey: "k1", ArgvDigest: "sha256:aa"})
	must(t, err)
	if !created || first.Phase != PhaseStarting || first.CreatedAt.IsZero() {
		t.Fatalf("first %+v created=%v", first, created)
	}
	// Re-reconcile: same UID, different details -> the stored record, not a new start.
	again, created, err := db.RecordCommandStart(Command{UID: "c1", Namespace: "ns", ArgvDigest: "sha256:bb", PID: 99})
	must(t, err)
	if created || again.ArgvDigest != "sha256:aa" || again.PID != 0 {
		t.Fatalf("second start created=%v %+v", created, again)
	}
	// Another object replaying the same idempotency key in the namespace.
	dup, created, err := db.RecordCommandStart(Command{UID: "c2", Namespace: "ns", IdempotencyKey: "k1", ArgvDigest: "sha256:aa"})
	must(t, err)
	if created || dup.UID != "c1" {
		t.Fatalf("replayed key created=%v %+v", created, dup)
	}
	// The same key for another argv (or session) is a conflict, not a replay of c1.
	_, created, err = db.RecordCommandStart(Command{UID: "c5", Namespace: "ns", IdempotencyKey: "k1", ArgvDigest: "sha256:cc"})
	wantCode(t, err, string(actuation.CodeIdempotencyConflict))
	if created {
		t.Fatal("a conflicting key created a record")
	}
	_, created, err = db.RecordCommandStart(Command{UID: "c6", Namespace: "ns", IdempotencyKey: "k1", ArgvDigest: "sha256:aa", SessionUID: "other-session"})
	wantCode(t, err, string(actuation.CodeIdempotencyConflict))
	if created {
		t.Fatal("a key replayed from another session created a record")
	}
	// Same key in another namespace is a different command.
	_, created, err = db.RecordCommandStart(Command{UID: "c3", Namespace: "other", IdempotencyKey: "k1"})
	must(t, err)
	if !created {
		t.Fatal("namespaced key collided")
	}
	// Updating the started command keeps its key; stealing the key is refused.
	first.PID, first.PGID, first.StartTime, first.Phase = 42, 42, 777, "Running"
	must(t, db.Commands().Put(first))
	wantCode(t, db.Commands().Put(Command{UID: "c4", Namespace: "ns", IdempotencyKey: "k1"}), string(actuation.CodeIdempotencyConflict))
	got, _, _ := db.Commands().Get("c1")
	if got.PID != 42 || got.StartTime != 777 {
		t.Fatalf("update lost: %+v", got)
	}
	// Deleting releases the key.
	must(t, db.Commands().Delete("c1"))
	_, created, err = db.RecordCommandStart(Command{UID: "c5", Namespace: "ns", IdempotencyKey: "k1"})
	must(t, err)
	if !created {
		t.Fatal("key not released by delete")
	}
}

func TestMarkInterrupted(t *testing.T) {
	db := open(t, t.TempDir())
	defer func() { _ = db.Close() }()
	must(t, db.Sessions().Put(Session{UID: "s-run", Namespace: "ns", Name: "a", Phase: "Running"}))
	must(t, db.Sessions().Put(Session{UID: "s-closed", Phase: "Closed"}))
	must(t, db.Commands().Put(Command{UID: "c-run", Phase: "Running", PID: 5}))
	must(t, db.Commands().Put(Command{UID: "c-start", Phase: PhaseStarting}))
	must(t, db.Commands().Put(Command{UID: "c-done", Phase: "Succeeded", Outcome: "exit 0"}))
	must(t, db.Waits().Put(Wait{UID: "w-pend", Phase: "Pending"}))
	must(t, db.Waits().Put(Wait{UID: "w-sat", Phase: "Satisfied"}))
	must(t, db.Patches().Put(Patch{UID: "p-apply", Phase: PhaseApplying}))
	must(t, db.Patches().Put(Patch{UID: "p-done", Phase: "Applied"}))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	sum, err := db.MarkInterrupted("agent restarted", now)
	must(t, err)
	if sum.Sessions != 1 || sum.Commands != 2 || sum.Waits != 1 || sum.Patches != 1 || len(sum.Records) != 5 {
		t.Fatalf("summary %+v", sum)
	}
	c, _, _ := db.Commands().Get("c-run")
	if c.Phase != PhaseFailed || c.Outcome != "interrupted: agent restarted" || !c.UpdatedAt.Equal(now) {
		t.Fatalf("command %+v", c)
	}
	if c, _, _ := db.Commands().Get("c-done"); c.Phase != "Succeeded" {
		t.Fatal("settled command touched")
	}
	recs, err := db.Recoveries().List(0)
	must(t, err)
	outcomes := map[string]string{}
	for _, r := range recs {
		outcomes[r.Resource] = r.Outcome
	}
	if outcomes["session/ns/a (s-run)"] != OutcomeFailedPermanent || outcomes["wait// (w-pend)"] != OutcomeFailedRetryable || outcomes["patch// (p-apply)"] != OutcomeUnknown {
		t.Fatalf("recovery outcomes %v", outcomes)
	}
	sum, err = db.MarkInterrupted("again", now)
	must(t, err)
	if sum.Sessions+sum.Commands+sum.Waits+sum.Patches != 0 {
		t.Fatalf("not idempotent: %+v", sum)
	}
}

func TestRecoveryRetentionIsBounded(t *testing.T) {
	saved := maxRecovery
	maxRecovery = 5
	defer func() { maxRecovery = saved }()
	db := open(t, t.TempDir())
	defer func() { _ = db.Close() }()
	for i := 0; i < 12; i++ {
		_, err := db.AppendRecovery(Recovery{Resource: fmt.Sprintf("r%d", i), Action: "kill", Outcome: OutcomeTerminated})
		must(t, err)
	}
	recs, err := db.Recoveries().List(0)
	must(t, err)
	if len(recs) != 5 || recs[0].Resource != "r7" || recs[4].Resource != "r11" {
		t.Fatalf("retained %+v", recs)
	}
}

func setRawVersion(t *testing.T, path string, v []byte) {
	t.Helper()
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	must(t, err)
	must(t, bdb.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchemaVersion, v) }))
	must(t, bdb.Close())
}

func TestSchemaVersionRefusals(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir)
	must(t, db.Sessions().Put(Session{UID: "s", Phase: "Running"}))
	path := db.Path()
	must(t, db.Close())

	setRawVersion(t, path, []byte("2"))
	_, err := Open(dir)
	wantCode(t, err, string(actuation.CodeStoreSchemaNewer))
	// The refusal did not rewrite the newer database.
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	must(t, err)
	must(t, bdb.View(func(tx *bolt.Tx) error {
		if v := string(tx.Bucket(bucketMeta).Get(keySchemaVersion)); v != "2" {
			return fmt.Errorf("version rewritten to %q", v)
		}
		return nil
	}))
	must(t, bdb.Close())

	setRawVersion(t, path, []byte("two"))
	_, err = Open(dir)
	wantCode(t, err, string(actuation.CodeStoreSchemaInvalid))

	// Data without any version key.
	other := filepath.Join(t.TempDir(), FileName)
	bdb, err = bolt.Open(other, 0o600, &bolt.Options{Timeout: time.Second})
	must(t, err)
	must(t, bdb.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("sessions")); return err }))
	must(t, bdb.Close())
	_, err = Open(filepath.Dir(other))
	wantCode(t, err, string(actuation.CodeStoreSchemaInvalid))
}

// The migration table runs pending steps in order on open.
func TestMigrationTableUpgrades(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir)
	must(t, db.Sessions().Put(Session{UID: "s", Phase: "Closed"}))
	must(t, db.Close())
	saved := migrations
	migrations = append(append([]func(*bolt.Tx) error{}, saved...), func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte("v2_bucket"))
		return err
	})
	defer func() { migrations = saved }()
	db = open(t, dir)
	defer func() { _ = db.Close() }()
	v, _ := db.Version()
	if v != 2 {
		t.Fatalf("version %d after upgrade", v)
	}
	must(t, db.bolt.View(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("v2_bucket")) == nil {
			return errors.New("v2 migration did not run")
		}
		return nil
	}))
	if s, ok, _ := db.Sessions().Get("s"); !ok || s.Phase != "Closed" {
		t.Fatal("data lost across migration")
	}
}

func checkIntegrity(t *testing.T, db *DB) {
	t.Helper()
	must(t, db.bolt.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	}))
}

const crashEnv = "WB_STORE_CRASH_DIR"

// TestCrashChild is the child half of TestCrashSafetyKill.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashEnv)
	if dir == "" {
		t.Skip("helper for TestCrashSafetyKill: runs only in the re-executed child (" + crashEnv + " unset)")
	}
	db, err := Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	for i := 0; i < 50; i++ {
		if _, _, err := db.RecordCommandStart(Command{UID: fmt.Sprintf("c%02d", i), Namespace: "ns", IdempotencyKey: fmt.Sprintf("k%02d", i), Phase: "Running", PID: 1000 + i}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
	}
	// A write transaction in flight when the process dies.
	tx, err := db.bolt.Begin(true)
	if err != nil {
		os.Exit(3)
	}
	if err := tx.Bucket(bucketCommands).Put([]byte("uncommitted"), []byte(`{"uid":"uncommitted"}`)); err != nil {
		os.Exit(3)
	}
	_ = unix.Kill(os.Getpid(), unix.SIGKILL) // does not return
	select {}
}

// The agent is SIGKILLed mid-transaction without closing the database: on
// reopen every committed record is intact, the in-flight one absent, and the
// B+tree passes bbolt's consistency check.
func TestCrashSafetyKill(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v\n%s", err, out)
	}
	db := open(t, dir)
	defer func() { _ = db.Close() }()
	checkIntegrity(t, db)
	cmds, err := db.Commands().List(0)
	must(t, err)
	if len(cmds) != 50 {
		t.Fatalf("%d commands after crash, want 50", len(cmds))
	}
	if _, ok, _ := db.Commands().Get("uncommitted"); ok {
		t.Fatal("uncommitted write survived")
	}
	// The idempotency index survived too: replay does not start again.
	if rec, created, err := db.RecordCommandStart(Command{UID: "new", Namespace: "ns", IdempotencyKey: "k07"}); err != nil || created || rec.UID != "c07" {
		t.Fatalf("replay after crash: created=%v rec=%+v err=%v", created, rec, err)
	}
	sum, err := db.MarkInterrupted("agent crashed", time.Now())
	must(t, err)
	if sum.Commands != 50 {
		t.Fatalf("interrupted %d", sum.Commands)
	}
}

// Copying the file while the database is open (what a crash leaves on disk
// after the last commit) yields an openable, consistent store with the data.
func TestCrashSafetyCopyWhileOpen(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir)
	defer func() { _ = db.Close() }()
	for i := 0; i < 20; i++ {
		must(t, db.Sessions().Put(Session{UID: fmt.Sprintf("s%02d", i), Phase: "Running", LastSeq: uint64(i)}))
	}
	dst := filepath.Join(t.TempDir(), "copy")
	must(t, os.MkdirAll(dst, 0o700))
	src, err := os.Open(db.Path())
	must(t, err)
	out, err := os.Create(filepath.Join(dst, FileName))
	must(t, err)
	_, err = io.Copy(out, src)
	must(t, err)
	_ = src.Close()
	must(t, out.Close())
	must(t, db.Sessions().Put(Session{UID: "after-copy", Phase: "Running"}))

	cp := open(t, dst)
	defer func() { _ = cp.Close() }()
	checkIntegrity(t, cp)
	ss, err := cp.Sessions().List(0)
	must(t, err)
	if len(ss) != 20 || ss[19].LastSeq != 19 {
		t.Fatalf("copy holds %d sessions", len(ss))
	}
}

func TestProcStartTime(t *testing.T) {
	st, err := ReadProcStartTime(os.Getpid())
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("/proc is not mounted")
	}
	must(t, err)
	if st == 0 {
		t.Fatal("starttime 0")
	}
	again, _ := ReadProcStartTime(os.Getpid())
	if again != st {
		t.Fatal("starttime not stable")
	}
	line := "123 (we ird) name) S 1 123 123 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10 18446744073709551615"
	v, err := parseProcStartTime([]byte(line))
	must(t, err)
	if v != 98765 {
		t.Fatalf("parsed %d", v)
	}
	_, err = parseProcStartTime([]byte("garbage"))
	if err == nil {
		t.Fatal("garbage parsed")
	}
}

// TestReplaceSwapsRecordsAtomically: Replace removes the old record and writes the new one
// (a pool member's record handed to its claimer), and a refused new record leaves the old
// one in place.
func TestReplaceSwapsRecordsAtomically(t *testing.T) {
	db := open(t, t.TempDir())
	defer func() { _ = db.Close() }()
	envs := db.Environments()
	must(t, envs.Put(Environment{UID: "member", Namespace: "ns", Name: "pool-a", Backend: "fixture-copy.v1"}))
	must(t, envs.Replace("member", Environment{UID: "claimer", Namespace: "ns", Name: "claim", Backend: "fixture-copy.v1", Phase: "Ready"}))
	if _, found, err := envs.Get("member"); err != nil || found {
		t.Fatalf("member record after Replace: found=%v err=%v", found, err)
	}
	if c, found, err := envs.Get("claimer"); err != nil || !found || c.Name != "claim" || c.Phase != "Ready" {
		t.Fatalf("claimer record after Replace: %+v found=%v err=%v", c, found, err)
	}
	// A new record the store refuses (an empty key) rolls the whole transaction back.
	must(t, envs.Put(Environment{UID: "member2", Namespace: "ns", Name: "pool-b"}))
	if err := envs.Replace("member2", Environment{UID: ""}); err == nil {
		t.Fatal("Replace with an empty key was accepted")
	}
	if _, found, err := envs.Get("member2"); err != nil || !found {
		t.Fatalf("a refused Replace removed the old record: found=%v err=%v", found, err)
	}
}
