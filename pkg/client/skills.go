package client

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/skills"
	"sensorium.dev/workbench/internal/skillsapi"
)

// TraceFetcher returns the bytes of a trace artifact. The default downloads it through
// artifacts/download; tests and embedders may read it elsewhere.
type TraceFetcher func(ctx context.Context, artifact string) ([]byte, error)

// DownloadTrace is the default TraceFetcher.
func (c *Client) DownloadTrace(ctx context.Context, artifact string) ([]byte, error) {
	var buf bytes.Buffer
	if _, _, err := c.Download(ctx, artifact, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// StartRecording creates an active Recording of environment env (optionally one session's
// commands) and waits until the node records.
func (c *Client) StartRecording(ctx context.Context, name, env, session string) (*wbv1.Recording, error) {
	rec := &wbv1.Recording{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace},
		Spec: wbv1.RecordingSpec{EnvironmentRef: wbv1.ObjectName(env), DesiredState: wbv1.RecordingActive}}
	if session != "" {
		s := wbv1.ObjectName(session)
		rec.Spec.SessionRef = &s
	}
	if err := c.Kube.Create(ctx, rec); err != nil {
		return nil, Wrap("recording "+name, err)
	}
	err := waitFor(ctx, c, rec, &wbv1.RecordingList{}, func(r *wbv1.Recording) (bool, error) {
		if r.Status.Refusal != nil {
			return false, refused("recording "+r.Name, r.Status.Refusal.Code, r.Status.Refusal.Message)
		}
		return r.Status.Phase == wbv1.RecordingPhaseRecording, nil
	})
	return rec, err
}

// StopRecording stops a Recording and waits until its trace is stored.
func (c *Client) StopRecording(ctx context.Context, name string) (*wbv1.Recording, error) {
	rec := &wbv1.Recording{}
	if err := c.Kube.Get(ctx, objectKey(c.Namespace, name), rec); err != nil {
		return nil, Wrap("recording "+name, err)
	}
	if rec.Spec.DesiredState != wbv1.RecordingStopped {
		orig := rec.DeepCopy()
		rec.Spec.DesiredState = wbv1.RecordingStopped
		if err := c.Kube.Patch(ctx, rec, ctrlMergeFrom(orig)); err != nil {
			return nil, Wrap("recording "+name, err)
		}
	}
	err := waitFor(ctx, c, rec, &wbv1.RecordingList{}, func(r *wbv1.Recording) (bool, error) {
		if r.Status.Refusal != nil {
			return false, refused("recording "+r.Name, r.Status.Refusal.Code, r.Status.Refusal.Message)
		}
		return r.Status.TraceArtifactRef != "", nil
	})
	return rec, err
}

// Trace fetches and decodes a stopped Recording's trace, checking its digest.
func (c *Client) Trace(ctx context.Context, rec *wbv1.Recording, fetch TraceFetcher) (*skills.Trace, error) {
	if rec.Status.TraceArtifactRef == "" {
		return nil, refused("recording "+rec.Name, "trace-invalid", "the recording has no stored trace yet: stop it first")
	}
	if fetch == nil {
		fetch = c.DownloadTrace
	}
	raw, err := fetch(ctx, string(rec.Status.TraceArtifactRef))
	if err != nil {
		return nil, err
	}
	if got := sha256Digest(raw); rec.Status.TraceDigest != "" && got != string(rec.Status.TraceDigest) {
		return nil, refused("recording "+rec.Name, "digest-mismatch", fmt.Sprintf("trace digest %s, the recording records %s", got, rec.Status.TraceDigest))
	}
	var t skills.Trace
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("decoding the trace of recording %s: %w", rec.Name, err)
	}
	return &t, nil
}

// CrystallizeRequest names a skill to crystallize from a stopped Recording.
type CrystallizeRequest struct {
	Recording     string
	SkillName     string // object name; default: the slug of DisplayName
	DisplayName   string
	Description   string
	Parameters    []skills.ParamSpec
	ExtraBackends []string
}

// Crystallize turns a stopped Recording's trace into a Skill object.
func (c *Client) Crystallize(ctx context.Context, r CrystallizeRequest, fetch TraceFetcher) (*wbv1.Skill, error) {
	var rec wbv1.Recording
	if err := c.Kube.Get(ctx, objectKey(c.Namespace, r.Recording), &rec); err != nil {
		return nil, Wrap("recording "+r.Recording, err)
	}
	t, err := c.Trace(ctx, &rec, fetch)
	if err != nil {
		return nil, err
	}
	m, err := skills.Crystallize(t, skills.CrystallizeOptions{Name: r.DisplayName, Description: r.Description,
		Parameters: r.Parameters, ExtraBackends: r.ExtraBackends, Now: time.Now()})
	if err != nil {
		return nil, refused("recording "+rec.Name, string(actuation.CodeOf(err)), err.Error())
	}
	spec, err := skillsapi.SkillSpec(m)
	if err != nil {
		return nil, err
	}
	art, recName := rec.Status.TraceArtifactRef, wbv1.ObjectName(rec.Name)
	spec.RecordingRef, spec.TraceArtifactRef, spec.TraceDigest = &recName, &art, rec.Status.TraceDigest
	name := r.SkillName
	if name == "" {
		name = m.Slug
	}
	sk := &wbv1.Skill{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}, Spec: spec}
	if err := c.Kube.Create(ctx, sk); err != nil {
		return nil, Wrap("skill "+name, err)
	}
	return sk, nil
}

// ReplayRequest replays a skill into an environment.
type ReplayRequest struct {
	Name        string
	Skill       string
	Environment string
	Parameters  map[string]string
	Mode        wbv1.SkillReplayMode
}

// Replay creates a SkillReplay.
func (c *Client) Replay(ctx context.Context, r ReplayRequest) (*wbv1.SkillReplay, error) {
	sr := &wbv1.SkillReplay{ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: c.Namespace},
		Spec: wbv1.SkillReplaySpec{SkillRef: wbv1.ObjectName(r.Skill), EnvironmentRef: wbv1.ObjectName(r.Environment), Mode: r.Mode}}
	if r.Name == "" {
		sr.GenerateName = r.Skill + "-replay-"
	}
	for k, v := range r.Parameters {
		sr.Spec.Parameters = append(sr.Spec.Parameters, wbv1.SkillParameterValue{Name: k, Value: v})
	}
	if err := c.Kube.Create(ctx, sr); err != nil {
		return nil, Wrap("skill replay of "+r.Skill, err)
	}
	return sr, nil
}

// WaitReplay waits until a replay has its result; onChange sees each status.
func (c *Client) WaitReplay(ctx context.Context, name string, onChange func(*wbv1.SkillReplay)) (*wbv1.SkillReplay, error) {
	sr := &wbv1.SkillReplay{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}}
	err := waitFor(ctx, c, sr, &wbv1.SkillReplayList{}, func(s *wbv1.SkillReplay) (bool, error) {
		if onChange != nil {
			onChange(s)
		}
		return s.Status.Result != "" && s.Status.Result != wbv1.SkillReplayRunning, nil
	})
	return sr, err
}

// ExportRequest builds a bundle of a skill, optionally with one replay's report.
type ExportRequest struct {
	Skill            string
	Replay           string // "" for none
	Profile          skills.RedactionProfile
	Override         bool
	WorkbenchVersion string
	ImageDigests     map[string]string
	// SigningKey, when set, signs the bundle (bundle_version 0.2.0, Ed25519 over content_hash).
	SigningKey ed25519.PrivateKey
}

// ExportBundle builds the SkillBundle of a skill: its manifest, the demonstration's trace, the
// replay's report, the proof computed from that evidence, with the chosen (or
// pre-selected) redaction and the content hash.
func (c *Client) ExportBundle(ctx context.Context, r ExportRequest, fetch TraceFetcher) (*skills.Bundle, error) {
	var sk wbv1.Skill
	if err := c.Kube.Get(ctx, objectKey(c.Namespace, r.Skill), &sk); err != nil {
		return nil, Wrap("skill "+r.Skill, err)
	}
	m, err := skillsapi.Manifest(&sk.Spec)
	if err != nil {
		return nil, err
	}
	if sk.Spec.RecordingRef == nil {
		return nil, refused("skill "+sk.Name, "trace-invalid", "the skill names no recording: its trace cannot be exported")
	}
	rec := wbv1.Recording{ObjectMeta: metav1.ObjectMeta{Name: string(*sk.Spec.RecordingRef)}}
	if sk.Spec.TraceArtifactRef != nil {
		rec.Status.TraceArtifactRef, rec.Status.TraceDigest = *sk.Spec.TraceArtifactRef, sk.Spec.TraceDigest
	}
	t, err := c.Trace(ctx, &rec, fetch)
	if err != nil {
		return nil, err
	}
	in := skills.ExportInput{Manifest: m, Trace: t, WorkbenchVersion: r.WorkbenchVersion, ImageDigests: r.ImageDigests, Now: time.Now(),
		Refs: []skills.EvidenceRef{{Kind: "Skill", Name: sk.Name}, {Kind: "Recording", Name: rec.Name},
			{Kind: "Artifact", Name: string(rec.Status.TraceArtifactRef), Digest: string(rec.Status.TraceDigest)}}}
	if r.Replay != "" {
		var sr wbv1.SkillReplay
		if err := c.Kube.Get(ctx, objectKey(c.Namespace, r.Replay), &sr); err != nil {
			return nil, Wrap("skill replay "+r.Replay, err)
		}
		if sr.Spec.SkillRef != wbv1.ObjectName(sk.Name) {
			return nil, Usage("replay %s is of skill %s, not %s", sr.Name, sr.Spec.SkillRef, sk.Name)
		}
		in.Replay = skillsapi.Report(&sr, m)
		in.Refs = append(in.Refs, skills.EvidenceRef{Kind: "SkillReplay", Name: sr.Name})
		if sr.Status.RecordingRef != "" {
			in.Refs = append(in.Refs, skills.EvidenceRef{Kind: "Recording", Name: string(sr.Status.RecordingRef)})
		}
	}
	b, err := skills.Export(in, skills.ExportOptions{Profile: r.Profile, Override: r.Override})
	if err != nil {
		return nil, refused("skill "+sk.Name, string(actuation.CodeOf(err)), err.Error())
	}
	if r.SigningKey != nil {
		if err := skills.Sign(b, r.SigningKey); err != nil {
			return nil, refused("skill "+sk.Name, string(actuation.CodeOf(err)), err.Error())
		}
	}
	return b, nil
}

// ImportRequest says how to import a bundle.
type ImportRequest struct {
	Name             string // Skill object name ("" = the manifest's slug)
	Create           bool   // create a Skill object from the manifest
	RequireSignature bool   // refuse an unsigned bundle (bundle-signature-required)
}

// BundleSigners returns the keys pinned by BundleSigners for namespace ns (an entry
// naming ns, or "*").
func (c *Client) BundleSigners(ctx context.Context, ns string) ([]skills.PinnedKey, error) {
	var list wbv1.BundleSignerList
	if err := c.Kube.List(ctx, &list); err != nil {
		return nil, err
	}
	var out []skills.PinnedKey
	for _, s := range list.Items {
		for _, n := range s.Spec.Namespaces {
			if n == ns || n == "*" {
				out = append(out, skills.PinnedKey{Name: s.Name, PublicKey: s.Spec.PublicKey})
				break
			}
		}
	}
	return out, nil
}

// ImportBundle verifies an unsigned or signed bundle without requiring a signature; see
// ImportBundleWith.
func (c *Client) ImportBundle(ctx context.Context, raw []byte, name string, create bool) (*skills.Bundle, *wbv1.Skill, error) {
	im, sk, err := c.ImportBundleWith(ctx, raw, ImportRequest{Name: name, Create: create})
	if im == nil {
		return nil, sk, err
	}
	return im.Bundle, sk, err
}

// ImportBundleWith verifies a bundle (size, schema, content hash, and a signature against
// the BundleSigners pinned for this namespace) and, when r.Create is set, creates a Skill
// object from its manifest. Importing never runs anything: replay is a separate, admitted
// act. A manifest whose commands a full redaction removed cannot become a Skill.
func (c *Client) ImportBundleWith(ctx context.Context, raw []byte, r ImportRequest) (*skills.Imported, *wbv1.Skill, error) {
	signers, err := c.BundleSigners(ctx, c.Namespace)
	if err != nil && !apierrors.IsForbidden(err) && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
		return nil, nil, Wrap("bundlesigners", err)
	} // without read access to BundleSigners no key is pinned: signed bundles are refused, unsigned ones import
	im, err := skills.ImportWith(raw, skills.ImportOptions{Signers: signers, RequireSignature: r.RequireSignature})
	if err != nil {
		return nil, nil, refused("bundle", string(actuation.CodeOf(err)), err.Error())
	}
	b := im.Bundle
	if !r.Create {
		return im, nil, nil
	}
	if err := b.Manifest.Validate(); err != nil {
		return im, nil, refused("bundle", string(actuation.CodeOf(err)), "the manifest cannot be replayed: "+err.Error())
	}
	spec, err := skillsapi.SkillSpec(&b.Manifest)
	if err != nil {
		return im, nil, err
	}
	name := r.Name
	if name == "" {
		name = b.Manifest.Slug
	}
	ann := map[string]string{"workbench.sensorium.dev/bundle-content-hash": b.ContentHash}
	if im.SignedBy != "" {
		ann["workbench.sensorium.dev/bundle-signed-by"] = im.SignedBy
	}
	sk := &wbv1.Skill{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Annotations: ann}, Spec: spec}
	if err := c.Kube.Create(ctx, sk); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return im, nil, refused("skill "+name, "invalid-spec", "a skill of that name exists; choose another name")
		}
		return im, nil, Wrap("skill "+name, err)
	}
	return im, sk, nil
}

func ctrlMergeFrom(obj ctrlclient.Object) ctrlclient.Patch { return ctrlclient.MergeFrom(obj) }

func sha256Digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}
