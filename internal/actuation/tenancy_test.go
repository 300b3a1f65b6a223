package actuation

import "testing"

func TestHostPathsOverlap(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"/srv/work", "/srv/work", true},
		{"/srv/work", "/srv/work/sub", true},
		{"/srv/work/sub/deeper", "/srv/work", true},
		{"/srv/work", "/srv/workshop", false},
		{"/srv/work/", "/srv/work", true},
		{"/srv/a", "/srv/b", false},
		{"/", "/srv", true},
	} {
		if got := HostPathsOverlap(c.a, c.b); got != c.want {
			t.Errorf("HostPathsOverlap(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestCheckHostTenancy(t *testing.T) {
	held := []HostClaim{{Holder: "uid-a", Ref: "ns1/a", Root: "repo", Path: "/srv/work/demo"}}
	heldRO := []HostClaim{{Holder: "uid-a", Ref: "ns1/a", Root: "repo", Path: "/srv/work/demo", ReadOnly: true}}
	for _, c := range []struct {
		name    string
		want    HostClaim
		held    []HostClaim
		sharing RootSharing
		refused bool
	}{
		{"same path, other holder", HostClaim{Holder: "uid-b", Path: "/srv/work/demo"}, held, "", true},
		{"parent path", HostClaim{Holder: "uid-b", Path: "/srv/work"}, held, "", true},
		{"child path", HostClaim{Holder: "uid-b", Path: "/srv/work/demo/src"}, held, "", true},
		{"sibling", HostClaim{Holder: "uid-b", Path: "/srv/work/demo2"}, held, "", false},
		{"same holder", HostClaim{Holder: "uid-a", Path: "/srv/work/demo"}, held, "", false},
		{"both read-only, policy none", HostClaim{Holder: "uid-b", Path: "/srv/work/demo", ReadOnly: true}, heldRO, RootSharingNone, true},
		{"both read-only, policy read-only", HostClaim{Holder: "uid-b", Path: "/srv/work/demo", ReadOnly: true}, heldRO, RootSharingReadOnly, false},
		{"read-write over read-only, policy read-only", HostClaim{Holder: "uid-b", Path: "/srv/work", ReadOnly: false}, heldRO, RootSharingReadOnly, true},
		{"read-only over read-write, policy read-only", HostClaim{Holder: "uid-b", Path: "/srv/work/demo/x", ReadOnly: true}, held, RootSharingReadOnly, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := CheckHostTenancy([]HostClaim{c.want}, c.held, c.sharing)
			if (r != nil) != c.refused {
				t.Fatalf("refusal %v, want refused=%v", r, c.refused)
			}
			if r != nil && r.Code != CodeRootInUse {
				t.Fatalf("code %s, want %s", r.Code, CodeRootInUse)
			}
		})
	}
	if ValidateRootSharing("Sometimes") == nil || ValidateRootSharing("") != nil || ValidateRootSharing(RootSharingReadOnly) != nil {
		t.Fatal("ValidateRootSharing does not hold its vocabulary")
	}
}

func TestArtifactDownloadVerb(t *testing.T) {
	for class, want := range map[string]string{"": "", "public": "", "internal": "", "confidential": VerbGetConfidential,
		"restricted": VerbGetRestricted, "top-secret": VerbGetRestricted} {
		if got := ArtifactDownloadVerb(class); got != want {
			t.Errorf("ArtifactDownloadVerb(%q) = %q, want %q", class, got, want)
		}
	}
}
