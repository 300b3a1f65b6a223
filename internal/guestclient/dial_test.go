package guestclient

import (
	"bufio"
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeDevice serves the hybrid-vsock preamble the way a vsock device does: it reads
// "CONNECT <port>\n" and answers reply, then writes "stream" (the guest's first bytes).
func fakeDevice(t *testing.T, reply string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "vm.vsock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				line, err := bufio.NewReader(c).ReadString('\n')
				if err != nil || !strings.HasPrefix(line, "CONNECT ") {
					return
				}
				if reply == "" {
					return // the guest does not listen: the device closes
				}
				_, _ = c.Write([]byte(reply + "stream")) // the client under test reports what arrived
				time.Sleep(100 * time.Millisecond)
			}()
		}
	}()
	return sock
}

func TestHybridPreamble(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sock := fakeDevice(t, "OK 1073741824\n")
	c, err := Dial(ctx, Endpoint{Path: sock, Hybrid: true, Port: 1024})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := c.Read(buf); err != nil || string(buf) != "stream" {
		t.Fatalf("the preamble consumed stream bytes: %q %v", buf, err)
	}
	_ = c.Close()

	for _, reply := range []string{"", "NOPE\n", "OK \n", "OK -1\n", "OK 01\n", "OK 99999999999\n", strings.Repeat("O", 40) + "\n"} {
		_, err := Dial(ctx, Endpoint{Path: fakeDevice(t, reply), Hybrid: true})
		if !errors.Is(err, ErrPreamble) {
			t.Errorf("reply %q: want ErrPreamble, got %v", reply, err)
		}
	}
}

func TestEndpointIdentityPinned(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sock := fakeDevice(t, "OK 1\n")
	var st syscall.Stat_t
	if err := syscall.Lstat(sock, &st); err != nil {
		t.Fatal(err)
	}
	c, err := Dial(ctx, Endpoint{Path: sock, Hybrid: true, Dev: st.Dev, Ino: st.Ino})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	_, err = Dial(ctx, Endpoint{Path: sock, Hybrid: true, Dev: st.Dev, Ino: st.Ino + 1})
	if !errors.Is(err, ErrEndpointReplaced) {
		t.Fatalf("want ErrEndpointReplaced, got %v", err)
	}
}

func TestWaitReadyGivesUpAtDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, attempts, err := WaitReady(ctx, Endpoint{Path: fakeDevice(t, ""), Hybrid: true}, testBinding(), 20*time.Millisecond)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || attempts < 2 {
		t.Fatalf("attempts %d: %v", attempts, err)
	}
}
