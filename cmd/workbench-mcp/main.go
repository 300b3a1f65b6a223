// Command workbench-mcp serves the workbench MCP tools over streamable HTTP. It holds no
// privilege of its own: every request carries the caller's Kubernetes bearer token and
// every tool call runs as that caller (internal/mcpserver.HTTPHandler).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"sensorium.dev/workbench/internal/mcpserver"
)

func main() {
	listen := flag.String("listen", ":8090", "address to serve MCP (streamable HTTP) on, path /mcp")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig naming the API server (only its address and CA are used); in-cluster config when empty")
	namespace := flag.String("namespace", "default", "namespace of tool calls without the "+mcpserver.NamespaceHeader+" header")
	certFile := flag.String("tls-cert-file", "", "serve HTTPS with this certificate")
	keyFile := flag.String("tls-private-key-file", "", "serve HTTPS with this key")
	flag.Parse()
	if err := run(*listen, *kubeconfig, *namespace, *certFile, *keyFile); err != nil {
		fmt.Fprintln(os.Stderr, "workbench-mcp:", err)
		os.Exit(1)
	}
}

func run(listen, kubeconfig, namespace, certFile, keyFile string) error {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("loading the API server address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcpserver.HTTPHandler(cfg, namespace))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Fprintln(os.Stderr, "workbench-mcp: serving MCP on", listen+"/mcp")
	if certFile != "" {
		err = srv.ListenAndServeTLS(certFile, keyFile)
	} else {
		err = srv.ListenAndServe()
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
