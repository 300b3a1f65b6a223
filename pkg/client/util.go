package client

import (
	"encoding/base64"
	"errors"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"slices"
)

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func isGone(err error) bool { return errors.Is(err, ErrGone) }

func ptr[T any](v T) *T { return &v }

func objectKey(ns, name string) ctrlclient.ObjectKey {
	return ctrlclient.ObjectKey{Namespace: ns, Name: name}
}

func encodeBase64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
