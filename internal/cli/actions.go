package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actions"
	"sensorium.dev/workbench/internal/termsafe"
	wbclient "sensorium.dev/workbench/pkg/client"
)

// catalogCommand: keygen, sign, verify of signed action catalogs (seed 002).
func catalogCommand(o *Options) *cobra.Command {
	c := &cobra.Command{Use: "catalog", Short: "Sign and verify action catalogs (Ed25519 over the canonical spec)"}
	var out string
	keygen := &cobra.Command{
		Use: "keygen --out FILE", Short: "Make an Ed25519 key: the private seed to FILE (0600), the public key to stdout", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return wbclient.Usage("--out is required")
			}
			pub, seed, err := actions.GenerateKey()
			if err != nil {
				return err
			}
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return wbclient.Usage("creating key file: %v", err)
			}
			if _, err := fmt.Fprintln(f, seed); err != nil {
				_ = f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			return o.print(map[string]string{"publicKey": pub, "keyFile": out}, func(w io.Writer) { fmt.Fprintln(w, pub) })
		},
	}
	keygen.Flags().StringVar(&out, "out", "", "file for the private key (must not exist)")

	var keyFile, signer, file string
	sign := &cobra.Command{
		Use:   "sign (CATALOG | -f FILE) --key FILE --signer NAME",
		Short: "Sign the catalog's spec as stored (CATALOG) or in a manifest file (-f, offline) and write its detached signature",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if keyFile == "" || signer == "" {
				return wbclient.Usage("--key and --signer are required")
			}
			if (file == "") == (len(args) == 0) {
				return wbclient.Usage("name exactly one of a stored CATALOG or -f FILE")
			}
			raw, err := os.ReadFile(keyFile)
			if err != nil {
				return wbclient.Usage("reading key: %v", err)
			}
			priv, err := actions.ParsePrivateKey(string(raw))
			if err != nil {
				return wbclient.Usage("%s: %v", keyFile, err)
			}
			if file != "" {
				return signCatalogFile(o, file, signer, priv)
			}
			cl, err := o.Client()
			if err != nil {
				return err
			}
			cat, err := cl.SignCatalog(cmd.Context(), args[0], signer, priv, metav1.NewTime(time.Now().UTC().Truncate(time.Second)))
			if err != nil {
				return err
			}
			return o.print(cat, func(w io.Writer) {
				fmt.Fprintf(w, "actioncatalog/%s signed by %s over %s\n", cat.Name, signer, cat.Signature.SpecDigest)
			})
		},
	}
	sign.Flags().StringVar(&keyFile, "key", "", "private key file (from catalog keygen)")
	sign.Flags().StringVar(&signer, "signer", "", "the ActionSigner holding the public key")
	sign.Flags().StringVarP(&file, "filename", "f", "", "sign an ActionCatalog manifest file offline, writing the signature into it (no cluster needed)")

	verify := &cobra.Command{
		Use: "verify CATALOG", Short: "Decide the catalog's signature with the same core as the manager and the node", Args: cobra.ExactArgs(1),
		RunE: o.withClient(func(cmd *cobra.Command, args []string, cl *wbclient.Client) error {
			v, err := cl.VerifyCatalog(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if err := o.print(v, func(w io.Writer) {
				fmt.Fprintf(w, "catalog %s %s: %s\ndigest %s\n", v.Catalog, v.Authorization, v.Message, v.SpecDigest)
				rows := [][]string{}
				for _, a := range v.Actions {
					rows = append(rows, []string{a.ID, string(a.Class), a.Authorization, orNone(string(a.Code))})
				}
				table(w, "ACTION\tCLASS\tAUTHORIZATION\tCODE", rows)
			}); err != nil {
				return err
			}
			if v.Authorization == actions.StateUnauthorized {
				return &wbclient.Error{Code: v.Code, Class: wbclient.ClassOf(v.Code), Message: v.Message, Object: "actioncatalog " + v.Catalog}
			}
			return nil
		}),
	}
	digest := &cobra.Command{
		Use: "digest CATALOG", Short: "Print the sha256 of the catalog's RFC 8785 canonical spec (what a signature covers)", Args: cobra.ExactArgs(1),
		RunE: o.withClient(func(cmd *cobra.Command, args []string, cl *wbclient.Client) error {
			cat, err := cl.GetCatalog(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			d, err := wbclient.CatalogDigest(cat)
			if err != nil {
				return err
			}
			return o.print(map[string]string{"specDigest": d}, func(w io.Writer) { fmt.Fprintln(w, d) })
		}),
	}
	c.AddCommand(keygen, sign, verify, digest)
	return c
}

// actionCommand: run a catalog action.
func actionCommand(o *Options) *cobra.Command {
	c := &cobra.Command{Use: "action", Short: "Run actions of signed catalogs"}
	var (
		envName, paramsJSON, pin, correlationID string
		params                                  []string
		timeout                                 int64
		wait                                    bool
	)
	run := &cobra.Command{
		Use: "run CATALOG ACTION --env E [--param k=v]... [--params-json JSON]", Short: "Create an ActionRun and wait for its outcome",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if envName == "" {
				return wbclient.Usage("--env is required")
			}
			p, err := buildParams(paramsJSON, params)
			if err != nil {
				return err
			}
			cl, err := o.Client()
			if err != nil {
				return err
			}
			r, err := cl.CreateActionRun(cmd.Context(), wbclient.ActionRunRequest{GenerateName: "run-", Catalog: args[0], Action: args[1],
				Environment: envName, Params: p, TimeoutSeconds: timeout, PinDigest: pin, CorrelationID: correlationID})
			if err != nil {
				return err
			}
			fmt.Fprintf(o.IO.ErrOut, "actionrun/%s created (correlation id %s)\n", r.Name, termsafe.Line(r.Labels[wbv1.CorrelationLabel]))
			if wait {
				if r, err = cl.WaitActionRun(cmd.Context(), r.Name, nil); err != nil {
					return err
				}
			}
			if err := o.print(r, func(w io.Writer) { printRun(w, r) }); err != nil {
				return err
			}
			if !wait {
				return nil
			}
			return wbclient.ActionRunOutcomeError(r)
		},
	}
	run.Flags().StringVar(&envName, "env", "", "the Environment whose workspace and node the run uses")
	run.Flags().StringArrayVar(&params, "param", nil, "one parameter k=v (v is JSON when it parses as JSON, else a string)")
	run.Flags().StringVar(&paramsJSON, "params-json", "", "all parameters as one JSON object")
	run.Flags().Int64Var(&timeout, "timeout", 0, "timeout in seconds (default: the action's)")
	run.Flags().StringVar(&pin, "pin", "", "refuse unless the catalog's spec digest is this (allowlist-catalog-mismatch)")
	run.Flags().BoolVar(&wait, "wait", true, "wait for the outcome")
	run.Flags().StringVar(&correlationID, "correlation-id", "", "correlation id labelling the run and its consent request (generated when empty)")
	c.AddCommand(run)
	return c
}

// buildParams merges --params-json and --param k=v into one JSON object.
func buildParams(paramsJSON string, kv []string) (json.RawMessage, error) {
	obj := map[string]json.RawMessage{}
	if paramsJSON != "" {
		if err := json.Unmarshal([]byte(paramsJSON), &obj); err != nil {
			return nil, wbclient.Usage("--params-json must be one JSON object: %v", err)
		}
	}
	for _, p := range kv {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, wbclient.Usage("--param %q must be k=v", p)
		}
		if json.Valid([]byte(v)) && v != "" && !isBareWord(v) {
			obj[k] = json.RawMessage(v)
		} else {
			b, _ := json.Marshal(v)
			obj[k] = b
		}
	}
	if len(obj) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(obj)
	return b, err
}

// isBareWord: a value such as true or 12 stays JSON; anything else that happens to be valid
// JSON only as a string literal is taken as the string.
func isBareWord(v string) bool {
	if v == "true" || v == "false" || v == "null" {
		return false
	}
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return false
	}
	return !strings.HasPrefix(v, "{") && !strings.HasPrefix(v, "[") && !strings.HasPrefix(v, `"`)
}

func printRun(w io.Writer, r *wbv1.ActionRun) {
	s := r.Status
	fmt.Fprintf(w, "actionrun/%s %s", r.Name, orNone(wbv1.ActionRunSummary(r).Phase))
	if s.ExitCode != nil {
		fmt.Fprintf(w, " exit=%d", *s.ExitCode)
	}
	if s.Refusal != nil {
		fmt.Fprintf(w, " refusal=%s: %s", s.Refusal.Code, s.Refusal.Message)
	}
	fmt.Fprintln(w)
	if s.Stdout != "" {
		fmt.Fprint(w, s.Stdout)
		if !strings.HasSuffix(s.Stdout, "\n") {
			fmt.Fprintln(w)
		}
	}
	for k, v := range s.ResultPointers {
		fmt.Fprintf(w, "%s=%s\n", k, v)
	}
	for _, f := range s.TouchedFiles {
		fmt.Fprintf(w, "wrote %s (%d bytes, %s)\n", f.Path, f.Size, f.Digest)
	}
	for _, n := range s.NetworkTranscript {
		fmt.Fprintf(w, "net %s:%d/%s out=%d in=%d %dms %s\n", n.Host, n.Port, n.Protocol, n.BytesOut, n.BytesIn, n.DurationMillis, n.Code)
	}
	for _, a := range s.ArtifactRefs {
		fmt.Fprintf(w, "artifact %s %s %s %d\n", a.Name, a.Digest, a.MediaType, a.Size)
	}
}
