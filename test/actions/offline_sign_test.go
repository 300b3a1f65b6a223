package actions

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/cli"
)

// TestCLISignsCatalogFileOffline: `kubectl workbench catalog sign -f catalog.yaml` signs a
// manifest file without the cluster, writing the signature into the file (its comments
// kept); the file applied as is is Authorized by the manager, exactly as one signed in the
// cluster; the same file with its spec edited after signing is not (issue 30 item 6).
func TestCLISignsCatalogFileOffline(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	decl, err := yaml.Marshal([]wbv1.ActionDeclaration{declaration("node.echo", wbv1.ActionClassReadOnlySpawn)})
	must(t, err)
	indented := "    " + strings.ReplaceAll(strings.TrimRight(string(decl), "\n"), "\n", "\n    ")
	manifest := "# reviewed in a pull request\napiVersion: workbench.sensorium.dev/v1alpha1\nkind: ActionCatalog\nmetadata:\n  name: offline\nspec:\n  actions:\n" + indented + "\n"
	file := writeFile(t, "catalog.yaml", manifest)
	keyFile := writeFile(t, "key", base64.StdEncoding.EncodeToString(f.key.Seed())+"\n")

	// No cluster needed: a kubeconfig pointing nowhere.
	var out, errOut strings.Builder
	code, o, e := kwNoCluster(t, "catalog", "sign", "-f", file, "--key", keyFile, "--signer", f.signer)
	out.WriteString(o)
	errOut.WriteString(e)
	if code != 0 {
		t.Fatalf("catalog sign -f exited %d: %s %s", code, out.String(), errOut.String())
	}
	signed, err := os.ReadFile(file)
	must(t, err)
	if !strings.Contains(string(signed), "# reviewed in a pull request") || !strings.Contains(string(signed), "signature:") {
		t.Fatalf("the signed file lost its comment or has no signature:\n%s", signed)
	}

	apply := func(name string, data []byte) *wbv1.ActionCatalog {
		var cat wbv1.ActionCatalog
		must(t, yaml.UnmarshalStrict(data, &cat))
		cat.Name, cat.Namespace = name, f.ns
		must(t, env.Client.Create(ctx, &cat))
		return &cat
	}
	cat := apply("offline", signed)
	eventually(t, 20*time.Second, "the file-signed catalog Authorized", func() (bool, string) {
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(cat), cat))
		return cat.Status.Authorization == wbv1.ActionAuthorized && cat.Status.Signer == f.signer &&
			cat.Status.ObservedGeneration == cat.Generation, fmt.Sprintf("%+v", cat.Status)
	})
	if code, out, errOut := kw(t, f.ns, "catalog", "verify", "offline"); code != 0 || !strings.Contains(out, "Authorized") {
		t.Fatalf("catalog verify of the applied file: %d %s %s", code, out, errOut)
	}

	tampered := strings.Replace(string(signed), "maxTimeoutSeconds: 60", "maxTimeoutSeconds: 3600", 1)
	if tampered == string(signed) {
		t.Fatalf("the test's tamper did not apply to:\n%s", signed)
	}
	bad := apply("offline-tampered", []byte(tampered))
	eventually(t, 20*time.Second, "the tampered file not Authorized", func() (bool, string) {
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(bad), bad))
		return bad.Status.ObservedGeneration == bad.Generation && bad.Status.Authorization != "" &&
			bad.Status.Authorization != wbv1.ActionAuthorized, fmt.Sprintf("%+v", bad.Status)
	})
}

// kwNoCluster runs the CLI with a kubeconfig whose server does not exist: what it does must
// not need the cluster.
func kwNoCluster(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	kc := writeFile(t, "nowhere.kubeconfig", `apiVersion: v1
kind: Config
clusters: [{name: x, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: x, context: {cluster: x, user: x}}]
current-context: x
users: [{name: x, user: {token: none}}]
`)
	var out, errOut strings.Builder
	code := cli.Main(append([]string{"--kubeconfig", kc, "-n", "default"}, args...), genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	return code, out.String(), errOut.String()
}
