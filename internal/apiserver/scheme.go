package apiserver

import (
	kruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// crdScheme reads the Workbench objects the subresources belong to.
func crdScheme() *kruntime.Scheme {
	s := kruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(wbv1.AddToScheme(s))
	return s
}
