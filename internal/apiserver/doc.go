// Package apiserver is workbench-apiserver: an aggregated API server (k8s.io/apiserver,
// registered with an APIService) serving group subresources.workbench.sensorium.dev, the
// streaming and action subresources of Workbench objects (docs/api-subresources.md).
//
// It is thin. kube-apiserver authenticates the caller, authorizes the subresource with RBAC,
// audits the call and proxies it here with the front-proxy headers; this server
// authenticates that (delegated authentication), authorizes again (delegated
// authorization), finds the node that runs the object, and forwards the request to that
// node's data plane over mutual TLS with its OWN client certificate, naming the end user in
// identity headers. The node accepts those headers only from this server's certificate and
// authorizes the end user with SubjectAccessReview. Users never need a node address, CA or
// token.
//
// +kubebuilder:object:generate=false
package apiserver
