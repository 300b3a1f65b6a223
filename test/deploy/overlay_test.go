// Package deploy checks the deployment overlays under config/ as kubectl's kustomize
// renders them.
package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"sensorium.dev/workbench/internal/backends/qemumicrovm"
	"sensorium.dev/workbench/internal/nodeagent/agent"
)

const kvmLabel = "workbench.sensorium.dev/kvm"

// kustomize renders dir with the kubectl that make control-plane builds (next to the test
// API server, KUBEBUILDER_ASSETS).
func kustomize(t *testing.T, dir string) (map[string]*appsv1.DaemonSet, map[string]*corev1.ConfigMap) {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Skip("KUBEBUILDER_ASSETS is unset: no kubectl to render the overlay with (make test sets it after make control-plane)")
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(assets, "kubectl"), "kustomize", filepath.Join(root, dir))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v: %s", dir, err, stderr.String())
	}
	ds, cms := map[string]*appsv1.DaemonSet{}, map[string]*corev1.ConfigMap{}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("rendered document: %v", err)
		}
		switch meta.Kind {
		case "DaemonSet":
			d := &appsv1.DaemonSet{}
			if err := yaml.UnmarshalStrict([]byte(doc), d); err != nil {
				t.Fatal(err)
			}
			ds[d.Name] = d
		case "ConfigMap":
			c := &corev1.ConfigMap{}
			if err := yaml.UnmarshalStrict([]byte(doc), c); err != nil {
				t.Fatal(err)
			}
			cms[c.Name] = c
		}
	}
	return ds, cms
}

func agentConfig(t *testing.T, d *appsv1.DaemonSet, cms map[string]*corev1.ConfigMap) agent.Config {
	t.Helper()
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name != "config" || v.ConfigMap == nil {
			continue
		}
		cm := cms[v.ConfigMap.Name]
		if cm == nil {
			t.Fatalf("%s mounts ConfigMap %s, which the overlay does not render", d.Name, v.ConfigMap.Name)
		}
		var c agent.Config
		if err := yaml.UnmarshalStrict([]byte(cm.Data["node-agent.yaml"]), &c); err != nil {
			t.Fatalf("%s's node-agent.yaml is not a node agent configuration: %v", d.Name, err)
		}
		return c
	}
	t.Fatalf("%s mounts no config volume", d.Name)
	return agent.Config{}
}

func affinityExcludesKVM(d *appsv1.DaemonSet) bool {
	a := d.Spec.Template.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key != kvmLabel || e.Operator != corev1.NodeSelectorOpNotIn || len(e.Values) != 1 || e.Values[0] != "true" {
				return false
			}
		}
		if len(term.MatchExpressions) == 0 {
			return false
		}
	}
	return true
}

// TestVMNodeOverlay: config/nodeagent-vm builds; it runs a VM agent (QEMU on, an image
// directory mounted read-only, /dev/kvm) only on nodes labelled for KVM, the plain agent
// only on the others (never two agents on one node), and the VM agent's memory request and
// limit hold maxVMs guests of maxMemoryMiB plus their VMM overhead plus the base agent.
func TestVMNodeOverlay(t *testing.T) {
	ds, cms := kustomize(t, "config/nodeagent-vm")
	plain, vm := ds["node-agent"], ds["node-agent-vm"]
	if plain == nil || vm == nil || len(ds) != 2 {
		t.Fatalf("DaemonSets %v, want node-agent and node-agent-vm", keys(ds))
	}
	if !affinityExcludesKVM(plain) || plain.Spec.Template.Spec.NodeSelector[kvmLabel] != "" {
		t.Errorf("node-agent may run on KVM nodes: affinity %+v", plain.Spec.Template.Spec.Affinity)
	}
	if vm.Spec.Template.Spec.NodeSelector[kvmLabel] != "true" || vm.Spec.Template.Spec.Affinity != nil {
		t.Errorf("node-agent-vm: nodeSelector %v, affinity %+v; want only %s=true", vm.Spec.Template.Spec.NodeSelector, vm.Spec.Template.Spec.Affinity, kvmLabel)
	}
	if c := agentConfig(t, plain, cms); c.QEMU != nil && c.QEMU.Enabled {
		t.Error("the plain node agent enables QEMU")
	}
	c := agentConfig(t, vm, cms)
	q := c.QEMU
	if q == nil || !q.Enabled || q.ImageDir == "" || q.MaxVMs <= 0 || q.MaxMemoryMiB <= 0 {
		t.Fatalf("node-agent-vm's qemu configuration %+v: want enabled with an image dir, maxVMs and maxMemoryMiB", q)
	}
	ctr := vm.Spec.Template.Spec.Containers[0]
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.MountPath] = m
	}
	if m, ok := mounts[q.ImageDir]; !ok || !m.ReadOnly {
		t.Errorf("the image directory %s is not mounted read-only: %+v", q.ImageDir, m)
	}
	if _, ok := mounts["/dev/kvm"]; !ok {
		t.Error("/dev/kvm is not mounted")
	}
	base := ds["node-agent"].Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]
	need := resource.MustParse(fmt.Sprintf("%dMi", int64(q.MaxVMs)*(int64(q.MaxMemoryMiB)+qemumicrovm.VMMOverheadMiB)))
	need.Add(base)
	lim, req := ctr.Resources.Limits[corev1.ResourceMemory], ctr.Resources.Requests[corev1.ResourceMemory]
	if lim.Cmp(need) < 0 || req.Cmp(lim) != 0 {
		t.Errorf("node-agent-vm memory request %s, limit %s; want both at least %s (%d VMs x (%d MiB + %d MiB) + the base agent's %s)",
			req.String(), lim.String(), need.String(), q.MaxVMs, q.MaxMemoryMiB, qemumicrovm.VMMOverheadMiB, base.String())
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
