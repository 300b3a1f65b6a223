package controllers

import "sigs.k8s.io/controller-runtime/pkg/cache"

// CacheOptions are the manager's informer options: every cached object is stored
// without its managedFields (often the largest part of a status-heavy object such as a
// TerminalCommand). No reconciler or webhook reads managedFields from the cache: field
// ownership is checked only against the API server (direct reads in the single-writer
// tests), and an update of a cached object with empty managedFields leaves the server's
// entries as they are.
func CacheOptions() cache.Options {
	return cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
}
