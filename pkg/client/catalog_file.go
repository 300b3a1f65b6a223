package client

import (
	"bytes"
	"crypto/ed25519"
	"fmt"

	yamlv3 "go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actions"
	"sensorium.dev/workbench/internal/convert"
)

// MaxCatalogFileBytes bounds a catalog file signed offline.
const MaxCatalogFileBytes = 4 << 20

// SignCatalogFile signs an ActionCatalog manifest offline (issue 30 item 6: GitOps users
// sign files, not cluster objects): it decodes the one ActionCatalog document in data
// strictly, validates it with the same core as the manager, signs the digest of its spec as
// decoded (the same RFC 8785 digest the manager and the node compute once it is applied:
// the ActionCatalog spec has no server-side defaults) and returns the file with a top-level
// signature block set, every other line (comments, order) as it was.
func SignCatalogFile(data []byte, signer string, priv ed25519.PrivateKey, now metav1.Time) ([]byte, *wbv1.ActionCatalog, error) {
	if len(data) > MaxCatalogFileBytes {
		return nil, nil, Usage("the catalog file is %d bytes, at most %d", len(data), MaxCatalogFileBytes)
	}
	var doc yamlv3.Node
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, nil, Usage("parsing the catalog file: %v", err)
	}
	var extra yamlv3.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, nil, Usage("the catalog file holds more than one document: sign a file with exactly one ActionCatalog")
	}
	if doc.Kind != yamlv3.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yamlv3.MappingNode {
		return nil, nil, Usage("the catalog file is not one YAML mapping")
	}
	var cat wbv1.ActionCatalog
	if err := yaml.UnmarshalStrict(data, &cat); err != nil {
		return nil, nil, Usage("decoding the ActionCatalog: %v", err)
	}
	if cat.Kind != "ActionCatalog" || cat.APIVersion != wbv1.GroupVersion.String() {
		return nil, nil, Usage("the file holds %s %s, not an %s ActionCatalog", cat.APIVersion, cat.Kind, wbv1.GroupVersion)
	}
	core, digest, err := convert.ActionCatalog(&cat)
	if err != nil {
		return nil, nil, err
	}
	if rs := actions.ValidateCatalog(core); len(rs) > 0 {
		return nil, nil, refused("actioncatalog "+cat.Name, string(rs[0].Code), rs[0].Error())
	}
	value, err := actions.Sign(priv, digest)
	if err != nil {
		return nil, nil, Usage("signing %s: %v", cat.Name, err)
	}
	cat.Signature = &wbv1.CatalogSignature{SignerRef: signer, SpecDigest: wbv1.Digest(digest), Value: value, SignedAt: &now}
	sigYAML, err := yaml.Marshal(cat.Signature)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the signature: %w", err)
	}
	var sigDoc yamlv3.Node
	if err := yamlv3.Unmarshal(sigYAML, &sigDoc); err != nil {
		return nil, nil, fmt.Errorf("encoding the signature: %w", err)
	}
	m := doc.Content[0]
	replaced := false
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "signature" {
			m.Content[i+1], replaced = sigDoc.Content[0], true
		}
	}
	if !replaced {
		m.Content = append(m.Content, &yamlv3.Node{Kind: yamlv3.ScalarNode, Tag: "!!str", Value: "signature"}, sigDoc.Content[0])
	}
	var out bytes.Buffer
	enc := yamlv3.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, nil, fmt.Errorf("writing the signed catalog: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, nil, fmt.Errorf("writing the signed catalog: %w", err)
	}
	// What is written must verify: decode the result and check the digest is unchanged.
	var back wbv1.ActionCatalog
	if err := yaml.UnmarshalStrict(out.Bytes(), &back); err != nil {
		return nil, nil, fmt.Errorf("re-reading the signed catalog: %w", err)
	}
	if _, d2, err := convert.ActionCatalog(&back); err != nil || d2 != digest {
		return nil, nil, fmt.Errorf("the signed file's spec digest %s differs from the signed %s (%v)", d2, digest, err)
	}
	return out.Bytes(), &cat, nil
}
