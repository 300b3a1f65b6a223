package artifactout

import (
	"context"
	"os"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/artifacts"
	"sensorium.dev/workbench/internal/platform/procexec"
)

func TestMain(m *testing.M) {
	procexec.MaybeRunHelper()
	os.Exit(m.Run())
}

const dir = "/artifacts"

// A PNG signature and IHDR chunk: enough for the sniffer.
const pngScript = `printf '\211PNG\r\n\032\n\000\000\000\015IHDR\000\000\000\001\000\000\000\001\010\006\000\000\000\037\025\304\211' > ` + dir + `/pic.png`

func produce(t *testing.T, p Policy, script string) (*Area, Result, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("artifact areas are tmpfs mounts used by sandboxes: run as root (as CI does)")
	}
	a, err := Prepare(t.TempDir(), p)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	})
	run, err := procexec.NewRunner(procexec.Limits{}).Run(context.Background(), procexec.Spec{
		Argv:          []string{"/bin/sh", "-c", script},
		Env:           []string{"PATH=/usr/bin:/bin"},
		Timeout:       30 * time.Second,
		Mounts:        []procexec.Mount{a.Mount(dir)},
		FileSizeLimit: a.FileSizeLimit(),
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Collect()
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	t.Logf("exit %d output %q result %+v", run.ExitCode, run.Output, res)
	return a, res, string(run.Output)
}

func policy() Policy {
	return Policy{MaxCount: 4, MaxBytesPer: 1 << 20, MaxBytesTotal: 4 << 20, AllowedMediaTypes: []string{"image/png", "text/plain"}}
}

func TestDeclaredTypesPromoted(t *testing.T) {
	a, res, _ := produce(t, policy(), pngScript+` && echo "a report" > `+dir+`/report.txt`)
	if res.Code != "" || len(res.Artifacts) != 2 {
		t.Fatalf("result %+v", res)
	}
	types := map[string]string{}
	for _, x := range res.Artifacts {
		types[x.Path] = x.MediaType
	}
	if types["pic.png"] != "image/png" || types["report.txt"] != "text/plain" {
		t.Errorf("sniffed types %v", types)
	}
	store, err := artifacts.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	if err := a.Promote(res, store); err != nil {
		t.Fatalf("Promote: %v", err)
	}
	for _, x := range res.Artifacts {
		info, err := store.Stat(x.SHA256)
		if err != nil || info.Size != x.Size {
			t.Errorf("%s not in the store as %s: %+v %v", x.Path, x.SHA256, info, err)
		}
	}
}

func TestUndeclaredTypeRefused(t *testing.T) {
	// An executable named as a text file: the type comes from the bytes.
	a, res, _ := produce(t, policy(), `echo ok > `+dir+`/a.txt && cp /bin/true `+dir+`/notes.txt`)
	if res.Code != string(actuation.CodeArtifactMediaTypeForbidden) || res.Path != "notes.txt" {
		t.Fatalf("result %+v, want %s on notes.txt", res, string(actuation.CodeArtifactMediaTypeForbidden))
	}
	store, err := artifacts.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	if err := a.Promote(res, store); actuation.CodeOf(err) != actuation.CodeArtifactMediaTypeForbidden {
		t.Errorf("Promote: %v", err)
	}
	for _, x := range res.Artifacts {
		if _, err := store.Stat(x.SHA256); err == nil {
			t.Errorf("%s was promoted", x.Path)
		}
	}
}

func TestWildcardType(t *testing.T) {
	p := policy()
	p.AllowedMediaTypes = []string{"image/*"}
	_, res, _ := produce(t, p, pngScript)
	if res.Code != "" {
		t.Errorf("image/* refused a PNG: %+v", res)
	}
	_, res, _ = produce(t, p, `echo text > `+dir+`/t`)
	if res.Code != string(actuation.CodeArtifactMediaTypeForbidden) {
		t.Errorf("image/* admitted text: %+v", res)
	}
}

func TestCaps(t *testing.T) {
	p := policy()
	p.MaxCount = 2
	_, res, _ := produce(t, p, `for i in 1 2 3 4; do echo $i > `+dir+`/$i.txt; done`)
	if res.Code != string(actuation.CodeArtifactCountCapReached) {
		t.Errorf("count cap: %+v", res)
	}
	p = policy()
	p.MaxBytesPer = 1000
	_, res, out := produce(t, p, `head -c 5000 /dev/zero | tr '\0' a > `+dir+`/big.txt`)
	if res.Code != string(actuation.CodeArtifactSizeCapReached) || res.Path != "big.txt" {
		t.Errorf("size cap: %+v (%q)", res, out)
	}
	p = policy()
	p.MaxBytesTotal, p.MaxBytesPer = 16<<10, 16<<10
	_, res, _ = produce(t, p, `head -c 12000 /dev/zero | tr '\0' a > `+dir+`/1.txt; head -c 12000 /dev/zero | tr '\0' b > `+dir+`/2.txt`)
	if res.Code != string(actuation.CodeArtifactTotalCapReached) {
		t.Errorf("total cap: %+v", res)
	}
}

func TestValidate(t *testing.T) {
	ok := policy()
	if err := Validate(ok); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Policy){
		"no count":     func(p *Policy) { p.MaxCount = 0 },
		"count":        func(p *Policy) { p.MaxCount = MaxCount + 1 },
		"no types":     func(p *Policy) { p.AllowedMediaTypes = nil },
		"bad type":     func(p *Policy) { p.AllowedMediaTypes = []string{"png"} },
		"star type":    func(p *Policy) { p.AllowedMediaTypes = []string{"*/*"} },
		"params":       func(p *Policy) { p.AllowedMediaTypes = []string{"text/plain; charset=utf-8"} },
		"per > total":  func(p *Policy) { p.MaxBytesPer = p.MaxBytesTotal + 1 },
		"no total cap": func(p *Policy) { p.MaxBytesTotal = 0 },
	} {
		p := policy()
		mut(&p)
		if err := Validate(p); actuation.CodeOf(err) != actuation.CodeInvalidSpec {
			t.Errorf("%s: %v", name, err)
		}
	}
}
