package dataplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Serving certificate parameters.
const (
	// ServingCertValidity is the lifetime of the generated CA and serving
	// certificate. The agent generates a fresh pair at every start and
	// publishes the CA in WorkbenchNode status.
	ServingCertValidity = 365 * 24 * time.Hour
	// MaxServingCertHosts bounds the SANs of a generated certificate.
	MaxServingCertHosts = 32
	// clockSkew backdates NotBefore for callers with slightly slow clocks.
	clockSkew = 5 * time.Minute
)

// GenerateServingCert creates, in memory, a self-signed ECDSA P-256 CA and a
// serving certificate it signs for hosts (IP addresses or DNS names; the
// first one is the subject). It returns the serving key pair for tls.Config
// and the CA certificate PEM to publish for callers. The CA private key is
// discarded: nothing else can ever be signed by it.
func GenerateServingCert(hosts []string) (tls.Certificate, []byte, error) {
	if len(hosts) == 0 || len(hosts) > MaxServingCertHosts {
		return tls.Certificate{}, nil, fmt.Errorf("serving cert: %d hosts outside 1..%d", len(hosts), MaxServingCertHosts)
	}
	var ips []net.IP
	var dns []string
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
			continue
		}
		if errs := validation.IsDNS1123Subdomain(h); len(errs) > 0 {
			return tls.Certificate{}, nil, fmt.Errorf("serving cert: host %q is neither an IP address nor a DNS name: %v", h, errs)
		}
		dns = append(dns, h)
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("serving cert: generating CA key: %w", err)
	}
	caSerial, err := serial()
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          caSerial,
		Subject:               pkix.Name{CommonName: "workbench-node-agent-ca@" + hosts[0], Organization: []string{"sensorium-workbench"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(ServingCertValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("serving cert: signing CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("serving cert: parsing CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("serving cert: generating serving key: %w", err)
	}
	leafSerial, err := serial()
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leafTmpl := &x509.Certificate{
		SerialNumber:          leafSerial,
		Subject:               pkix.Name{CommonName: hosts[0], Organization: []string{"sensorium-workbench"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(ServingCertValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              dns,
		IPAddresses:           ips,
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("serving cert: signing serving cert: %w", err)
	}
	leaf, err := x509.ParseCertificate(leafDER)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("serving cert: parsing serving cert: %w", err)
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	return tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key, Leaf: leaf}, caPEM, nil
}

func serial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serving cert: serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil // serial numbers must be positive
}
