package cli

import (
	"crypto/ed25519"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbclient "sensorium.dev/workbench/pkg/client"
)

// signCatalogFile is `catalog sign -f FILE`: the signature is written into the file
// (replaced atomically), so a catalog is signed in a pull request before it is applied.
func signCatalogFile(o *Options, file, signer string, priv ed25519.PrivateKey) error {
	st, err := os.Stat(file)
	if err != nil {
		return wbclient.Usage("reading %s: %v", file, err)
	}
	if !st.Mode().IsRegular() || st.Size() > wbclient.MaxCatalogFileBytes {
		return wbclient.Usage("%s must be a regular file of at most %d bytes", file, wbclient.MaxCatalogFileBytes)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return wbclient.Usage("reading %s: %v", file, err)
	}
	out, cat, err := wbclient.SignCatalogFile(data, signer, priv, metav1.NewTime(time.Now().UTC().Truncate(time.Second)))
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".catalog-sign-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", file, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(out); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing %s: %w", file, err)
	}
	if err := tmp.Chmod(st.Mode().Perm()); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing %s: %w", file, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", file, err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("writing %s: %w", file, err)
	}
	return o.print(cat, func(w io.Writer) {
		fmt.Fprintf(w, "%s: actioncatalog/%s signed by %s over %s\n", file, cat.Name, signer, cat.Signature.SpecDigest)
	})
}
