package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actions"
	"sensorium.dev/workbench/internal/skills"
	wbclient "sensorium.dev/workbench/pkg/client"
)

// Seed 004: record a demonstration, crystallize a skill, replay it, export and import its
// content-hashed bundle. Proof verdicts are printed literally; partial and inconclusive are
// never shown as success, and the exit status says which verdict it was.

// Exit statuses of `skill replay` and `skill export` by proof verdict (pass is 0).
const (
	exitVerdictFail         = 1
	exitVerdictPartial      = 3
	exitVerdictInconclusive = 4
)

func verdictExit(v string) error {
	switch v {
	case string(skills.VerdictPass):
		return nil
	case string(skills.VerdictPartial):
		return &wbclient.ExitError{Command: "proof verdict partial", Code: exitVerdictPartial}
	case string(skills.VerdictInconclusive):
		return &wbclient.ExitError{Command: "proof verdict inconclusive", Code: exitVerdictInconclusive}
	default:
		return &wbclient.ExitError{Command: "proof verdict " + v, Code: exitVerdictFail}
	}
}

// verdictLine renders a verdict literally, with what it does not prove.
func verdictLine(v string) string {
	switch v {
	case string(skills.VerdictPass):
		return "pass"
	case string(skills.VerdictPartial):
		return "partial — NOT proven: some gates are inconclusive"
	case string(skills.VerdictInconclusive):
		return "inconclusive — NOT proven: the evidence is insufficient"
	case "":
		return "none — no proof computed yet"
	default:
		return v + " — the evidence contradicts the claim"
	}
}

func recordCommand(o *Options) *cobra.Command {
	c := &cobra.Command{Use: "record", Short: "Record admitted work on an environment as an interaction trace"}
	var env, session string
	start := &cobra.Command{
		Use: "start NAME -e ENV", Short: "Start a Recording: the node records each admitted command, applied patch, satisfied wait and probe", Args: cobra.ExactArgs(1),
		RunE: o.withClient(func(cmd *cobra.Command, args []string, cl *wbclient.Client) error {
			if env == "" {
				return wbclient.Usage("--environment is required")
			}
			rec, err := cl.StartRecording(cmd.Context(), args[0], env, session)
			if err != nil {
				return err
			}
			return o.printObject(rec, func(w io.Writer) {
				fmt.Fprintf(w, "recording/%s recording environment %s on node %s (trace %s, initial state %s)\n",
					rec.Name, rec.Spec.EnvironmentRef, rec.Status.NodeName, rec.Status.TraceID, rec.Status.InitialStateDigest)
			})
		}),
	}
	start.Flags().StringVarP(&env, "environment", "e", "", "environment to record")
	start.Flags().StringVar(&session, "session", "", "record only this session's commands and waits")
	stop := &cobra.Command{
		Use: "stop NAME", Short: "Stop a Recording and wait until its trace is stored", Args: cobra.ExactArgs(1),
		RunE: o.withClient(func(cmd *cobra.Command, args []string, cl *wbclient.Client) error {
			rec, err := cl.StopRecording(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return o.printObject(rec, func(w io.Writer) {
				s := rec.Status
				fmt.Fprintf(w, "recording/%s stopped: %d edges (%d commands, %d patches, %d waits, %d probes)\n", rec.Name, s.Edges,
					s.Counts.Commands, s.Counts.Patches, s.Counts.Waits, s.Counts.Probes)
				fmt.Fprintf(w, "  trace      artifact/%s %s\n  states     %s → %s\n", s.TraceArtifactRef, s.TraceDigest, s.InitialStateDigest, s.LastStateDigest)
			})
		}),
	}
	c.AddCommand(start, stop)
	return c
}

func parseParams(kvs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, wbclient.Usage("--param %q: want name=value", kv)
		}
		out[k] = v
	}
	return out, nil
}

func skillCommand(o *Options) *cobra.Command {
	c := &cobra.Command{Use: "skill", Short: "Crystallize, replay, show, export and import skills"}
	c.AddCommand(crystallizeCommand(o), skillReplayCommand(o), skillShowCommand(o), skillExportCommand(o), skillImportCommand(o), skillSchemaCommand(o))
	return c
}

func crystallizeCommand(o *Options) *cobra.Command {
	var req wbclient.CrystallizeRequest
	var params []string
	c := &cobra.Command{
		Use: "crystallize RECORDING --display-name NAME", Short: "Turn a stopped Recording's trace into a Skill", Args: cobra.ExactArgs(1),
		RunE: o.withClient(func(cmd *cobra.Command, args []string, cl *wbclient.Client) error {
			req.Recording = args[0]
			kv, err := parseParams(params)
			if err != nil {
				return err
			}
			for k, v := range kv {
				req.Parameters = append(req.Parameters, skills.ParamSpec{Name: k, Value: v})
			}
			sort.Slice(req.Parameters, func(i, j int) bool { return req.Parameters[i].Name < req.Parameters[j].Name })
			if req.DisplayName == "" {
				req.DisplayName = args[0]
			}
			sk, err := cl.Crystallize(cmd.Context(), req, nil)
			if err != nil {
				return err
			}
			return o.printObject(sk, func(w io.Writer) { printSkill(w, sk) })
		}),
	}
	c.Flags().StringVar(&req.SkillName, "name", "", "Skill object name (default: the slug of --display-name)")
	c.Flags().StringVar(&req.DisplayName, "display-name", "", "human name of the skill")
	c.Flags().StringVar(&req.Description, "description", "", "what the skill does")
	c.Flags().StringArrayVar(&params, "param", nil, "name=value: the demonstrated value becomes parameter {{name}} (repeatable)")
	c.Flags().StringArrayVar(&req.ExtraBackends, "backend", nil, "a further backend the skill declares it may replay on (repeatable)")
	return c
}

func printSkill(w io.Writer, sk *wbv1.Skill) {
	s := sk.Spec
	fmt.Fprintf(w, "skill/%s %q v%d (id %s, from trace %s, demonstrated on %s)\n", sk.Name, s.Name, s.Version, s.SkillID, s.DerivedFromTraceID, s.Backend)
	for _, p := range s.Parameters {
		fmt.Fprintf(w, "  parameter  %s (default %q, %d occurrences)\n", p.Name, p.Default, p.Occurrences)
	}
	fmt.Fprintf(w, "  declares   profiles=%v backends=%v actions=%v\n", s.Capabilities.Profiles, s.Capabilities.Backends, s.Capabilities.ActionIDs)
	for _, st := range s.Steps {
		what := ""
		switch {
		case st.Command != nil:
			what = fmt.Sprintf("%s %s", st.Command.Profile, strings.Join(st.Command.Argv, " "))
		case st.Patch != nil:
			what = fmt.Sprintf("patch %s (%s, %d operations)", st.Patch.Root, st.Patch.Format, len(st.Patch.Operations))
		case st.Condition != nil:
			what = fmt.Sprintf("%s %s (state check)", st.Condition.Condition, st.Condition.Result)
		}
		fmt.Fprintf(w, "  step %-3d %-7s %-50s expects %s → %s\n", st.Index, st.Kind, what, short(string(st.ExpectedBefore)), short(string(st.ExpectedAfter)))
	}
}

func short(d string) string {
	if len(d) > 19 {
		return d[:19]
	}
	return d
}

func printReplay(w io.Writer, sr *wbv1.SkillReplay) {
	s := sr.Status
	verdict := ""
	if s.Proof != nil {
		verdict = string(s.Proof.OverallVerdict)
	}
	fmt.Fprintf(w, "skillreplay/%s of skill %s on %s (%s)\n", sr.Name, sr.Spec.SkillRef, sr.Spec.EnvironmentRef, s.Backend)
	fmt.Fprintf(w, "  result     %s (%d of %d edges committed)\n", s.ResultText, s.EdgesCommitted, s.EdgesAttempted)
	fmt.Fprintf(w, "  fidelity   %s", s.Fidelity)
	if s.Semantic != nil && !s.Semantic.Available {
		fmt.Fprintf(w, " (semantic: unavailable — %s)", s.Semantic.Reason)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  verdict    %s\n", verdictLine(verdict))
	if s.Proof != nil {
		for _, g := range s.Proof.Gates {
			fmt.Fprintf(w, "    %-28s %-12s %s\n", g.ID, g.Verdict, g.Reason)
		}
	}
	for _, d := range s.Denials {
		fmt.Fprintf(w, "  denied     edge %d: %s: %s\n", d.Edge, d.Code, d.Message)
	}
	for _, sg := range s.Surprises {
		fmt.Fprintf(w, "  surprise   edge %d %s (halted=%v): %s\n", sg.Edge, sg.Kind, sg.Halted, sg.Message)
		if sg.ExpectedHash != "" || sg.ObservedHash != "" {
			fmt.Fprintf(w, "             expected %s\n             observed %s\n", sg.ExpectedHash, sg.ObservedHash)
		}
		for _, d := range sg.Differences {
			fmt.Fprintf(w, "             %s: expected %s, observed %s\n", d.Path, pathState(d.Expected), pathState(d.Observed))
		}
	}
}

func pathState(s *wbv1.RecordedPathState) string {
	if s == nil {
		return "absent"
	}
	return fmt.Sprintf("%s %o %s", s.Type, s.Mode, short(s.Digest))
}

func skillReplayCommand(o *Options) *cobra.Command {
	var req wbclient.ReplayRequest
	var params []string
	var mode string
	var wait bool
	c := &cobra.Command{
		Use: "replay SKILL -e ENV", Short: "Replay a skill through normal admission (patch steps wait for an operator's approval)", Args: cobra.ExactArgs(1),
		RunE: o.withClient(func(cmd *cobra.Command, args []string, cl *wbclient.Client) error {
			req.Skill, req.Mode = args[0], wbv1.SkillReplayMode(mode)
			if req.Environment == "" {
				return wbclient.Usage("--environment is required")
			}
			var err error
			if req.Parameters, err = parseParams(params); err != nil {
				return err
			}
			sr, err := cl.Replay(cmd.Context(), req)
			if err != nil {
				return err
			}
			if !wait {
				return o.printObject(sr, func(w io.Writer) { fmt.Fprintf(w, "skillreplay/%s created\n", sr.Name) })
			}
			sr, err = cl.WaitReplay(cmd.Context(), sr.Name, nil)
			if err != nil {
				return err
			}
			if err := o.printObject(sr, func(w io.Writer) { printReplay(w, sr) }); err != nil {
				return err
			}
			if sr.Status.Proof == nil {
				return verdictExit(string(skills.VerdictInconclusive))
			}
			return verdictExit(string(sr.Status.Proof.OverallVerdict))
		}),
	}
	c.Flags().StringVarP(&req.Environment, "environment", "e", "", "target environment")
	c.Flags().StringVar(&req.Name, "name", "", "SkillReplay name (default: generated)")
	c.Flags().StringArrayVar(&params, "param", nil, "name=value (repeatable)")
	c.Flags().StringVar(&mode, "mode", "exact", "exact (halt at the first state-hash mismatch) or structural (halt when an edge's effect diverges)")
	c.Flags().BoolVar(&wait, "wait", true, "wait for the result; the exit status is the proof verdict (0 pass, 1 fail, 3 partial, 4 inconclusive)")
	return c
}

func skillShowCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use: "show SKILL", Short: "Show a skill's manifest and its replays with their verdicts", Args: cobra.ExactArgs(1),
		RunE: o.withClient(func(cmd *cobra.Command, args []string, cl *wbclient.Client) error {
			var sk wbv1.Skill
			if err := cl.Kube.Get(cmd.Context(), client.ObjectKey{Namespace: cl.Namespace, Name: args[0]}, &sk); err != nil {
				return wbclient.Wrap("skill "+args[0], err)
			}
			replays, err := replaysOf(cmd.Context(), cl, sk.Name)
			if err != nil {
				return err
			}
			return o.printObject(&sk, func(w io.Writer) {
				printSkill(w, &sk)
				if len(replays) == 0 {
					fmt.Fprintln(w, "  replays    none — no proof of replay fidelity yet")
				}
				for i := range replays {
					fmt.Fprintln(w)
					printReplay(w, &replays[i])
				}
			})
		}),
	}
}

func replaysOf(ctx context.Context, cl *wbclient.Client, skill string) ([]wbv1.SkillReplay, error) {
	var list wbv1.SkillReplayList
	if err := cl.Kube.List(ctx, &list, client.InNamespace(cl.Namespace)); err != nil {
		return nil, wbclient.Wrap("skill replays", err)
	}
	var out []wbv1.SkillReplay
	for _, r := range list.Items {
		if string(r.Spec.SkillRef) == skill {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreationTimestamp.Before(&out[j].CreationTimestamp) })
	return out, nil
}

func skillExportCommand(o *Options) *cobra.Command {
	var req wbclient.ExportRequest
	var profile, file, signKey string
	c := &cobra.Command{
		Use: "export SKILL [-f FILE]", Short: "Export a content-hashed SkillBundle (redaction pre-selected, never silently none; signed with --sign-key)", Args: cobra.ExactArgs(1),
		RunE: o.withClient(func(cmd *cobra.Command, args []string, cl *wbclient.Client) error {
			req.Skill, req.Profile, req.WorkbenchVersion = args[0], skills.RedactionProfile(profile), Version
			if signKey != "" {
				text, err := readCapped(signKey, 4096)
				if err != nil {
					return wbclient.Usage("reading the signing key: %v", err)
				}
				if req.SigningKey, err = actions.ParsePrivateKey(string(text)); err != nil {
					return wbclient.Usage("the signing key %s: %v", signKey, err)
				}
			}
			b, err := cl.ExportBundle(cmd.Context(), req, nil)
			if err != nil {
				return err
			}
			raw, err := skills.Marshal(b)
			if err != nil {
				return err
			}
			if file == "" {
				file = fmt.Sprintf("%s.v%d.skill.json", b.Manifest.Slug, b.SkillVersion)
			}
			if file == "-" {
				if _, err := o.IO.Out.Write(append(raw, '\n')); err != nil {
					return err
				}
			} else if err := os.WriteFile(file, append(raw, '\n'), 0o600); err != nil {
				return fmt.Errorf("writing bundle %s: %w", file, err)
			}
			w := o.IO.ErrOut
			fmt.Fprintf(w, "bundle %s of skill %s written to %s\n", b.BundleID, b.Manifest.Slug, file)
			fmt.Fprintf(w, "  redaction   %s (%s)", b.RedactionProfile, b.Proof.Redaction.Selection)
			if len(b.Evidence.SecretKinds) > 0 {
				fmt.Fprintf(w, " (secret patterns found: %s)", strings.Join(b.Evidence.SecretKinds, ", "))
			}
			fmt.Fprintf(w, "\n  content_hash %s\n  signed      %s\n  verdict     %s\n", b.ContentHash, signedLine(b, ""), verdictLine(string(b.Proof.OverallVerdict)))
			for _, g := range b.Proof.Gates {
				fmt.Fprintf(w, "    %-28s %-12s %s\n", g.ID, g.Verdict, g.Reason)
			}
			return nil
		}),
	}
	c.Flags().StringVar(&req.Replay, "replay", "", "include this SkillReplay's report as replay evidence")
	c.Flags().StringVar(&profile, "redaction", "", "none, transcript_pii or full (default: pre-selected by the secret detector)")
	c.Flags().BoolVar(&req.Override, "allow-secrets", false, "export with redaction none although secret patterns were found (the proof then fails gate.redaction_verify)")
	c.Flags().StringVarP(&file, "filename", "f", "", "output file (default <slug>.v<version>.skill.json; - for stdout)")
	c.Flags().StringVar(&signKey, "sign-key", "", "sign the bundle with this Ed25519 key file (the format of `catalog keygen`); importers verify it against a BundleSigner")
	return c
}

// signedLine says plainly whether a bundle is signed, and by which pinned signer when an
// import verified it.
func signedLine(b *skills.Bundle, signer string) string {
	if !b.Signed || b.Signature == nil {
		return `false ("signature": null: nobody vouches for this bundle beyond its content hash)`
	}
	if signer == "" {
		return "true (ed25519, key " + b.Signature.KeyID + ")"
	}
	return "true, verified with BundleSigner " + signer + " (key " + b.Signature.KeyID + ")"
}

func skillSchemaCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use: "schema", Short: "Print the JSON Schema of a SkillBundle (docs/schemas/skill-bundle.schema.json)", Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			_, err := o.IO.Out.Write(skills.BundleSchema())
			return err
		},
	}
}

func skillImportCommand(o *Options) *cobra.Command {
	var file, name string
	var create, requireSigned bool
	c := &cobra.Command{
		Use: "import -f FILE", Short: "Verify a SkillBundle (schema, content hash) and optionally create its Skill; never runs anything", Args: cobra.NoArgs,
		RunE: o.withClient(func(cmd *cobra.Command, _ []string, cl *wbclient.Client) error {
			var raw []byte
			var err error
			if file == "-" {
				raw, err = io.ReadAll(io.LimitReader(o.IO.In, skills.MaxBundleBytes+1))
			} else {
				raw, err = readCapped(file, skills.MaxBundleBytes+1)
			}
			if err != nil {
				return wbclient.Usage("reading the bundle: %v", err)
			}
			im, sk, err := cl.ImportBundleWith(cmd.Context(), raw, wbclient.ImportRequest{Name: name, Create: create, RequireSignature: requireSigned})
			if im != nil {
				b, w := im.Bundle, o.IO.Out
				fmt.Fprintf(w, "bundle %s verified: content_hash %s, redaction %s\n  signed      %s\n", b.BundleID, b.ContentHash, b.RedactionProfile, signedLine(b, im.SignedBy))
				fmt.Fprintf(w, "  skill       %q v%d (%d steps)\n  verdict     %s\n", b.Manifest.Name, b.SkillVersion, len(b.Manifest.Steps), verdictLine(string(b.Proof.OverallVerdict)))
				if sk != nil {
					fmt.Fprintf(w, "  created     skill/%s (replay it with `kubectl workbench skill replay %s -e ENV`)\n", sk.Name, sk.Name)
				}
			}
			return err
		}),
	}
	c.Flags().StringVarP(&file, "filename", "f", "-", "the bundle (- for stdin)")
	c.Flags().BoolVar(&create, "create", false, "create a Skill object from the bundle's manifest")
	c.Flags().BoolVar(&requireSigned, "require-signature", false, "refuse a bundle not signed by a BundleSigner pinned for this namespace")
	c.Flags().StringVar(&name, "name", "", "Skill object name (default: the manifest's slug)")
	return c
}

func readCapped(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return io.ReadAll(io.LimitReader(f, max))
}

// Version is the workbench version written into exported bundles' reproducibility
// section (stamped at build time with -X like the node agent's).
var Version = "v0.1.0-dev"
