package actionnode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

func TestC1ReadOnlySpawn(t *testing.T) {
	ns, dir := setup(t)
	catalog(t, ns, "cat", perl(t, ns, "read", "C1", `use Cwd;
open(my $in, "<", "`+dir+`/input.txt") or die "read: $!"; print <$in>;
if (open(my $w, ">", "`+dir+`/new")) { print "wrote\n" } else { print "read-only\n" }
open(my $s, ">", "$ENV{TMPDIR}/s") or die "scratch: $!"; print $s "s\n"; close $s;
open($s, "<", "$ENV{TMPDIR}/s") or die; print <$s>; print getcwd(), "\n";`))
	r := final(t, ns, start(t, ns, "cat", "r1", "read", nil).Name)
	succeeded(t, r)
	contains(t, "stdout", r.Status.Stdout, "workspace input", "read-only", "s\n/tmp")
	if _, err := os.Stat(filepath.Join(dir, "new")); err == nil {
		t.Error("a C1 run wrote into the workspace")
	}
	if r.Status.NodeName != nodeName || r.Status.StartTime == nil || r.Status.CompletionTime == nil || r.Status.OutputDigest == "" {
		t.Errorf("node status fields %+v", r.Status)
	}
	// The node publishes the classes it enforces.
	var wn wbv1.WorkbenchNode
	eventually(t, 30*time.Second, "WorkbenchNode with action classes", func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKey{Name: nodeName}, &wn)
		return err == nil && len(wn.Status.ActionClasses) == 7, fmt.Sprintf("%v %+v", err, wn.Status.ActionClasses)
	})
	for _, c := range wn.Status.ActionClasses {
		if c.Availability != wbv1.ActionAvailable {
			t.Errorf("class %s is %s on this machine: %s %s", c.Class, c.Availability, c.Code, c.Message)
		}
	}
}

func TestC2AllowlistedScript(t *testing.T) {
	ns, _ := setup(t)
	d := perl(t, ns, "greet", "C2", `die "usage" unless $ARGV[0] eq "--params-json";
printf('{"greeting":"hello","params":%s,"other":1}', $ARGV[1]);`)
	path := d.Executable.Path
	body, err := os.ReadFile(path)
	must(t, err)
	sum := sha256.Sum256(body)
	d.Executable.SHA256 = hex.EncodeToString(sum[:])
	d.ParametersSchema = &apiextensionsv1.JSON{Raw: []byte(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"],"additionalProperties":false}`)}
	d.ResultContract = wbv1.ResultContract{StdoutFormat: wbv1.StdoutJSON, ResultPointerFields: []string{"greeting"}}
	catalog(t, ns, "cat", d)
	r := final(t, ns, start(t, ns, "cat", "r1", "greet", map[string]any{"name": "world"}).Name)
	succeeded(t, r)
	if r.Status.ResultPointers["greeting"] != `"hello"` || len(r.Status.ResultPointers) != 1 {
		t.Errorf("result pointers %v", r.Status.ResultPointers)
	}
	contains(t, "stdout", r.Status.Stdout, `"params":{"name":"world"}`)
	// The script is edited after signing: its pin no longer matches, nothing runs.
	must(t, os.WriteFile(path, []byte("echo tampered\n"), 0o644))
	r = final(t, ns, start(t, ns, "cat", "r2", "greet", map[string]any{"name": "world"}).Name)
	if reason(r) != string(wbv1.ActionRunRefused) || refusalCode(r) != string(actuation.CodeScriptHashMismatch) || r.Status.StartTime != nil {
		t.Errorf("tampered script: completed %s refusal %+v", reason(r), r.Status.Refusal)
	}
}

func writeDecl(t *testing.T, ns, id, code string, total, perFile int64) wbv1.ActionDeclaration {
	d := perl(t, ns, id, "C3", code)
	d.FSWrite = &wbv1.FSWriteParams{WriteRoot: wbv1.CwdAddress{Root: "repo", Path: "out"}, MaxBytesTotal: total, MaxBytesPerFile: perFile}
	return d
}

func TestC3ScopedWrite(t *testing.T) {
	ns, dir := setup(t)
	out := filepath.Join(dir, "out")
	must(t, os.Mkdir(out, 0o755))
	catalog(t, ns, "cat",
		writeDecl(t, ns, "write", `mkdir "`+out+`/sub" or die "mkdir: $!";
open(my $r, ">", "`+out+`/sub/r.txt") or die "r: $!"; print $r "report\n"; close $r or die;
open(my $z, ">", "`+out+`/z.bin") or die "z: $!"; print $z "\0" x 1000; close $z or die;
if (open(my $o, ">", "`+dir+`/outside")) { print "outside-written\n" } else { print "outside-refused\n" }`, 1<<20, 64<<10),
		writeDecl(t, ns, "overflow", `open(my $f, ">", "`+out+`/big") or die "big: $!"; binmode $f;
my $total = 0;
while ($total < 300000) { my $n = syswrite($f, "\0" x 65536); if (!defined $n) { print "stopped at $total: $!\n"; exit 1 } $total += $n }
print "wrote $total\n";`, 1<<20, 100000))
	r := final(t, ns, start(t, ns, "cat", "ok", "write", nil).Name)
	succeeded(t, r)
	contains(t, "stdout", r.Status.Stdout, "outside-refused")
	if len(r.Status.TouchedFiles) != 2 || r.Status.TouchedFiles[0].Path != "sub/r.txt" && r.Status.TouchedFiles[1].Path != "sub/r.txt" {
		t.Fatalf("touched files %+v", r.Status.TouchedFiles)
	}
	for _, f := range r.Status.TouchedFiles {
		if f.Digest == "" || f.Size == 0 {
			t.Errorf("touched file %+v", f)
		}
	}
	if b, err := os.ReadFile(filepath.Join(out, "sub/r.txt")); err != nil || string(b) != "report\n" {
		t.Errorf("committed file: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "outside")); err == nil {
		t.Error("a write outside the write root reached the workspace")
	}

	// Past the per-file cap: the write fails mid-write (EFBIG), nothing is committed.
	r = final(t, ns, start(t, ns, "cat", "over", "overflow", nil).Name)
	contains(t, "stdout", r.Status.Stdout, "stopped at 100001: File too large")
	if reason(r) != string(wbv1.ActionRunFailed) || refusalCode(r) != string(actuation.CodeWriteFileCapReached) {
		t.Errorf("over the cap: completed %s refusal %+v", reason(r), r.Status.Refusal)
	}
	if len(r.Status.TouchedFiles) != 1 || r.Status.TouchedFiles[0].Size != 100001 {
		t.Errorf("touched files %+v: the write must stop one byte past the cap", r.Status.TouchedFiles)
	}
	if _, err := os.Stat(filepath.Join(out, "big")); err == nil {
		t.Error("a capped write was committed")
	}
}

func egressDecl(t *testing.T, ns, id string, perConn int64, argv ...string) wbv1.ActionDeclaration {
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = "'" + a + "'"
	}
	d := perl(t, ns, id, "C4", "exec("+strings.Join(quoted, ", ")+") or die \"exec: $!\";")
	d.Egress = &wbv1.EgressParams{Endpoints: []wbv1.EgressEndpoint{{Host: "localhost", Port: int32(https.port), Protocol: "https"}},
		MaxBytesTotal: 8 << 20, MaxBytesPerConnection: perConn}
	return d
}

func TestC4Egress(t *testing.T) {
	ns, dir := setup(t)
	ca, err := os.ReadFile(https.caFile)
	must(t, err)
	caFile := filepath.Join(dir, "ca.pem") // inside the environment's root, readable by runs
	must(t, os.WriteFile(caFile, ca, 0o644))
	p := strconv.Itoa(https.port)
	url := "https://localhost:" + p
	other := https.port + 1
	if other > 65535 {
		other = https.port - 1
	}
	catalog(t, ns, "cat",
		egressDecl(t, ns, "allowed", 4<<20, "/usr/bin/curl", "-sS", "--cacert", caFile, url+"/hello"),
		egressDecl(t, ns, "other-port", 4<<20, "/usr/bin/curl", "-sS", "--cacert", caFile, "https://localhost:"+strconv.Itoa(other)+"/hello"),
		egressDecl(t, ns, "direct", 4<<20, "/usr/bin/curl", "-sS", "--noproxy", "*", "--connect-timeout", "5", "--cacert", caFile, "https://127.0.0.1:"+p+"/hello"),
		egressDecl(t, ns, "dns", 4<<20, "/usr/bin/getent", "ahostsv4", "not-declared.example.org"),
		egressDecl(t, ns, "big", 64<<10, "/usr/bin/curl", "-sS", "-o", "/dev/null", "--cacert", caFile, url+"/big"))

	r := final(t, ns, start(t, ns, "cat", "allowed", "allowed", nil).Name)
	succeeded(t, r)
	contains(t, "stdout", r.Status.Stdout, "hello from the endpoint")
	if len(r.Status.NetworkTranscript) != 1 {
		t.Fatalf("transcript %+v", r.Status.NetworkTranscript)
	}
	c := r.Status.NetworkTranscript[0]
	if c.Host != "localhost" || c.Port != int32(https.port) || c.Protocol != "https" || c.BytesOut == 0 || c.BytesIn == 0 || c.Code != "" {
		t.Errorf("transcript entry %+v", c)
	}

	r = final(t, ns, start(t, ns, "cat", "other", "other-port", nil).Name)
	if reason(r) != string(wbv1.ActionRunFailed) || refusalCode(r) != string(actuation.CodeEgressEndpointForbidden) ||
		len(r.Status.NetworkTranscript) != 1 || r.Status.NetworkTranscript[0].Code != string(actuation.CodeEgressEndpointForbidden) {
		t.Errorf("undeclared endpoint: completed %s refusal %+v transcript %+v", reason(r), r.Status.Refusal, r.Status.NetworkTranscript)
	}

	r = final(t, ns, start(t, ns, "cat", "direct", "direct", nil).Name)
	if reason(r) != string(wbv1.ActionRunFailed) || deref(r.Status.ExitCode) != int32(7) || len(r.Status.NetworkTranscript) != 0 {
		t.Errorf("direct connection: completed %s exit %v transcript %+v", reason(r), deref(r.Status.ExitCode), r.Status.NetworkTranscript)
	}

	r = final(t, ns, start(t, ns, "cat", "dns", "dns", nil).Name)
	if reason(r) != string(wbv1.ActionRunFailed) || refusalCode(r) != string(actuation.CodeEgressDNSNameForbidden) {
		t.Errorf("undeclared name: completed %s refusal %+v", reason(r), r.Status.Refusal)
	}

	r = final(t, ns, start(t, ns, "cat", "big", "big", nil).Name)
	if reason(r) != string(wbv1.ActionRunFailed) || refusalCode(r) != string(actuation.CodeEgressByteCapReached) || len(r.Status.NetworkTranscript) != 1 {
		t.Fatalf("download past the cap: completed %s refusal %+v transcript %+v", reason(r), r.Status.Refusal, r.Status.NetworkTranscript)
	}
	if c := r.Status.NetworkTranscript[0]; c.BytesIn+c.BytesOut != 64<<10 || c.Code != string(actuation.CodeEgressByteCapReached) {
		t.Errorf("cut connection %+v: want exactly the 65536-byte cap relayed", c)
	}
}

// pngCode writes a minimal PNG (signature and IHDR chunk) to the artifact directory.
const pngCode = `open(my $p, ">", "$ENV{WORKBENCH_ARTIFACT_DIR}/pic.png") or die "png: $!"; binmode $p;
print $p "\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89"; close $p or die;
`

func artifactDecl(t *testing.T, ns, id, code string) wbv1.ActionDeclaration {
	d := perl(t, ns, id, "C5", code)
	d.Artifact = &wbv1.ArtifactParams{MaxCount: 4, MaxBytesPer: 1 << 20, MaxBytesTotal: 4 << 20, AllowedMediaTypes: []string{"image/png", "text/plain"}}
	return d
}

func TestC5Artifacts(t *testing.T) {
	ns, _ := setup(t)
	catalog(t, ns, "cat",
		artifactDecl(t, ns, "produce", pngCode+`open(my $n, ">", "$ENV{WORKBENCH_ARTIFACT_DIR}/notes.txt") or die; print $n "notes\n"; close $n or die;`),
		artifactDecl(t, ns, "exe", `use File::Copy; copy("/bin/true", "$ENV{WORKBENCH_ARTIFACT_DIR}/looks-like.txt") or die "copy: $!";`))
	r := final(t, ns, start(t, ns, "cat", "ok", "produce", nil).Name)
	succeeded(t, r)
	if len(r.Status.ArtifactRefs) != 2 {
		t.Fatalf("artifact refs %+v", r.Status.ArtifactRefs)
	}
	for _, ref := range r.Status.ArtifactRefs {
		var art wbv1.Artifact
		must(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: string(ref.Name)}, &art))
		ready := meta.FindStatusCondition(art.Status.Conditions, wbv1.ConditionReady)
		if art.Status.Digest != ref.Digest || art.Status.Size != ref.Size || art.Status.NodeName != nodeName || ready == nil || ready.Status != "True" {
			t.Errorf("artifact %s: %+v (ref %+v)", ref.Name, art.Status, ref)
		}
		want := map[string]string{"pic.png": "image/png", "notes.txt": "text/plain"}[ref.Role]
		if ref.MediaType != want {
			t.Errorf("artifact %s (%s) sniffed as %s, want %s", ref.Name, ref.Role, ref.MediaType, want)
		}
	}
	// An executable named .txt: the type comes from the bytes, and it is not declared.
	r = final(t, ns, start(t, ns, "cat", "exe", "exe", nil).Name)
	if reason(r) != string(wbv1.ActionRunFailed) || refusalCode(r) != string(actuation.CodeArtifactMediaTypeForbidden) || len(r.Status.ArtifactRefs) != 0 {
		t.Errorf("undeclared media type: completed %s refusal %+v refs %+v", reason(r), r.Status.Refusal, r.Status.ArtifactRefs)
	}
}

func TestC6ComposedUnion(t *testing.T) {
	ns, dir := setup(t)
	out := filepath.Join(dir, "out")
	must(t, os.Mkdir(out, 0o755))
	d := perl(t, ns, "compose", "C6", `use IO::Socket::INET;
open(my $c, ">", "`+out+`/c.txt") or die "c: $!"; print $c "composed\n"; close $c or die;
open(my $a, ">", "$ENV{WORKBENCH_ARTIFACT_DIR}/a.txt") or die "a: $!"; print $a "art\n"; close $a or die;
my $s = IO::Socket::INET->new(PeerAddr => "192.0.2.1:80", Timeout => 3); print $s ? "connected\n" : "no-network\n";`)
	d.Composed = &wbv1.ComposedParams{Effects: []wbv1.ComposedEffect{wbv1.EffectScopedFSWrite, wbv1.EffectArtifactProduce}}
	d.FSWrite = &wbv1.FSWriteParams{WriteRoot: wbv1.CwdAddress{Root: "repo", Path: "out"}, MaxBytesTotal: 1 << 20, MaxBytesPerFile: 1 << 16}
	d.Artifact = &wbv1.ArtifactParams{MaxCount: 1, MaxBytesPer: 1 << 16, MaxBytesTotal: 1 << 20, AllowedMediaTypes: []string{"text/plain"}}
	catalog(t, ns, "cat", d)
	r := final(t, ns, start(t, ns, "cat", "r", "compose", nil).Name)
	succeeded(t, r)
	contains(t, "stdout", r.Status.Stdout, "no-network")
	if len(r.Status.TouchedFiles) != 1 || len(r.Status.ArtifactRefs) != 1 || len(r.Status.NetworkTranscript) != 0 {
		t.Errorf("composed capture: touched %+v artifacts %+v transcript %+v", r.Status.TouchedFiles, r.Status.ArtifactRefs, r.Status.NetworkTranscript)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "c.txt")); string(b) != "composed\n" {
		t.Errorf("committed %q", b)
	}
}

func TestCatalogEditedAfterSigningStops(t *testing.T) {
	ns, _ := setup(t)
	cat := catalog(t, ns, "cat", perl(t, ns, "a", "C1", `print "one\n";`))
	succeeded(t, final(t, ns, start(t, ns, "cat", "r0", "a", nil).Name))
	// The catalog is edited after signing (the signature stays, now stale): nothing of it
	// runs any more.
	must(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(cat), cat))
	cat.Spec.Actions[0].DefaultTimeoutSeconds = 31
	must(t, env.Client.Update(context.Background(), cat))
	// Admission refuses the run (the node re-verifies the same way at dispatch: a run
	// admitted before the edit is refused there, see internal/nodeagent/actionruns).
	run := &wbv1.ActionRun{ObjectMeta: metav1.ObjectMeta{Name: "r1", Namespace: ns},
		Spec: wbv1.ActionRunSpec{CatalogRef: "cat", ActionID: "a", EnvironmentRef: "e"}}
	err := env.Client.Create(context.Background(), run)
	if err == nil || !strings.Contains(err.Error(), string(actuation.CodeActionCatalogUnauthorized)) {
		t.Errorf("a run of an edited catalog: %v, want %s", err, actuation.CodeActionCatalogUnauthorized)
	}
}
