package actuation

import "testing"

func TestCheckBackendOffered(t *testing.T) {
	for _, id := range []string{BackendHostLocal, BackendFixtureCopy, BackendQEMUMicroVM, BackendVfkitSystem, ""} {
		if r := CheckBackendOffered(id); r != nil {
			t.Errorf("CheckBackendOffered(%q) = %v, want admitted", id, r)
		}
	}
	for _, id := range []string{BackendCloudHypervisor, BackendFirecracker, "qemu-microvm.v2", "HOST-LOCAL", "vfkit-system.v1 "} {
		r := CheckBackendOffered(id)
		if r == nil || r.Code != CodeBackendNotOffered || r.Field != "spec.backend" {
			t.Errorf("CheckBackendOffered(%q) = %v, want %s on spec.backend", id, r, CodeBackendNotOffered)
		}
	}
}
