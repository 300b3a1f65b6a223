package sourcetest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// UploadPack is git's server side of a fetch, run by SSHServer for each exec request.
const UploadPack = "/usr/bin/git-upload-pack"

// SSHKey is an ed25519 key pair: the private key in OpenSSH PEM form (what a Secret's
// ssh-privatekey holds) and its public key.
type SSHKey struct {
	PEM    []byte
	Public ssh.PublicKey
	Signer ssh.Signer
}

// NewSSHKey generates an ed25519 key pair.
func NewSSHKey(t testing.TB) SSHKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return SSHKey{PEM: pem.EncodeToMemory(block), Public: signer.PublicKey(), Signer: signer}
}

// SSHServer is an SSH server on loopback (golang.org/x/crypto/ssh) that serves the git
// repositories under a root to one client key: public-key authentication only, and the
// only command it runs is `git-upload-pack '<root>/<name>'` (git's fetch over ssh), with
// the channel as the program's stdin/stdout/stderr and its exit status replied.
type SSHServer struct {
	Addr    string // 127.0.0.1:port
	HostKey SSHKey
	// AuthAttempts counts public keys offered (accepted or not), Accepted those accepted,
	// Execs the upload-pack programs run.
	AuthAttempts atomic.Int64
	Accepted     atomic.Int64
	Execs        atomic.Int64

	root   string
	client ssh.PublicKey
	ln     net.Listener
	wg     sync.WaitGroup
}

// ServeSSH starts an SSHServer for the repositories under root accepting only client
// (closed with the test). It skips the test when git-upload-pack is not installed.
func ServeSSH(t testing.TB, root string, client ssh.PublicKey) *SSHServer {
	t.Helper()
	if _, err := os.Stat(UploadPack); err != nil {
		t.Skipf("git-upload-pack not installed at %s: %v", UploadPack, err)
	}
	s := &SSHServer{HostKey: NewSSHKey(t), root: filepath.Clean(root), client: client}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			s.AuthAttempts.Add(1)
			if bytes.Equal(key.Marshal(), s.client.Marshal()) {
				s.Accepted.Add(1)
				return nil, nil
			}
			return nil, errors.New("key not accepted")
		},
	}
	cfg.AddHostKey(s.HostKey.Signer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.ln, s.Addr = ln, ln.Addr().String()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serveConn(c, cfg)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.wg.Wait()
	})
	return s
}

// KnownHosts is the known_hosts line pinning the server's host key at its address.
func (s *SSHServer) KnownHosts() []byte { return s.KnownHostsFor(s.HostKey.Public) }

// KnownHostsFor is a known_hosts line pinning key (another host key) at the server's address.
func (s *SSHServer) KnownHostsFor(key ssh.PublicKey) []byte {
	return []byte(knownhosts.Line([]string{s.Addr}, key) + "\n")
}

// URL is the ssh:// URL of the repository <root>/<name>.
func (s *SSHServer) URL(name string) string {
	return "ssh://git@" + s.Addr + filepath.Join(s.root, name)
}

func (s *SSHServer) serveConn(c net.Conn, cfg *ssh.ServerConfig) {
	defer func() { _ = c.Close() }()
	conn, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	defer func() { _ = conn.Close() }()
	go ssh.DiscardRequests(reqs)
	var wg sync.WaitGroup
	defer wg.Wait()
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "session channels only")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveSession(ch, creqs)
		}()
	}
}

// serveSession takes env (GIT_PROTOCOL only) and one exec request.
func (s *SSHServer) serveSession(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer func() { _ = ch.Close() }()
	var env []string
	for req := range reqs {
		switch req.Type {
		case "env":
			var kv struct{ Name, Value string }
			ok := ssh.Unmarshal(req.Payload, &kv) == nil && kv.Name == "GIT_PROTOCOL" && !strings.ContainsAny(kv.Value, "\x00\n")
			if ok {
				env = append(env, "GIT_PROTOCOL="+kv.Value)
			}
			_ = req.Reply(ok, nil)
		case "exec":
			var cmd struct{ Command string }
			repo, ok := "", ssh.Unmarshal(req.Payload, &cmd) == nil
			if ok {
				repo, ok = s.uploadPackPath(cmd.Command)
			}
			_ = req.Reply(ok, nil)
			if !ok {
				_, _ = io.WriteString(ch.Stderr(), "only git-upload-pack of a served repository\n")
				s.exit(ch, 1)
				return
			}
			s.Execs.Add(1)
			s.exit(ch, s.uploadPack(ch, repo, env))
			return
		default:
			_ = req.Reply(false, nil)
		}
	}
}

// uploadPackPath parses `git-upload-pack '<path>'` naming a directory under the root.
func (s *SSHServer) uploadPackPath(command string) (string, bool) {
	arg, ok := strings.CutPrefix(command, "git-upload-pack ")
	if !ok || len(arg) < 2 || arg[0] != '\'' || arg[len(arg)-1] != '\'' {
		return "", false
	}
	p := arg[1 : len(arg)-1]
	if strings.Contains(p, "'") || !filepath.IsAbs(p) || filepath.Clean(p) != p || !strings.HasPrefix(p, s.root+"/") {
		return "", false
	}
	if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
		return "", false
	}
	return p, true
}

func (s *SSHServer) uploadPack(ch ssh.Channel, repo string, env []string) uint32 {
	cmd := exec.Command(UploadPack, repo)
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + s.root, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}, env...)
	cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 1
	}
	if err := cmd.Start(); err != nil {
		_, _ = io.WriteString(ch.Stderr(), err.Error()+"\n")
		return 1
	}
	// Not waited for: the client may keep its side open after upload-pack exits.
	go func() {
		_, _ = io.Copy(stdin, ch)
		_ = stdin.Close()
	}()
	if err := cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() > 0 {
			return uint32(ee.ExitCode())
		}
		return 1
	}
	return 0
}

func (s *SSHServer) exit(ch ssh.Channel, status uint32) {
	_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
}
