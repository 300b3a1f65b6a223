package actions

import (
	"fmt"
	"slices"
)

// ValidateSigner checks a pinned signer (ActionSigner, BundleSigner) the way it is used:
// the key must parse as an Ed25519 public key, and "*" (all namespaces) must be the only
// namespace entry, so a signer is never read as scoped when it is not. It returns the key id.
func ValidateSigner(publicKey string, namespaces []string) (string, error) {
	pub, err := ParsePublicKey(publicKey)
	if err != nil {
		return "", err
	}
	if len(namespaces) == 0 {
		return "", fmt.Errorf("the signer names no namespace")
	}
	if slices.Contains(namespaces, "*") && len(namespaces) > 1 {
		return "", fmt.Errorf(`"*" (all namespaces) must be the only namespace entry, got %d entries`, len(namespaces))
	}
	return KeyID(pub), nil
}
