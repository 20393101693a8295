// Package pgbouncertest starts a PgBouncer for a test, in front of a
// PostgreSQL server the test names, with a stock configuration: nothing
// but where to listen, whom to let in (trust), which server to pool and
// the pool mode. In particular no ignore_startup_parameters: fleet must
// connect through a pooler as its operators install it.
//
// Without the pgbouncer binary (PATH, /usr/sbin, /usr/local/sbin) a test
// that asks for one skips, saying so in one line, unless
// FLEET_TEST_REQUIRE=all (set by .ci/run), where it fails.
package pgbouncertest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fleet-go/fleet/internal/syncbuf"
)

// EnvRequire is the variable that, set to "all", turns a missing
// pgbouncer into a failure.
const EnvRequire = "FLEET_TEST_REQUIRE"

// The pool modes of PgBouncer that fleet supports.
const (
	Session     = "session"
	Transaction = "transaction"
)

// Options shapes a PgBouncer.
type Options struct {
	// Mode is the pool mode: Session or Transaction.
	Mode string
	// PoolSize is default_pool_size, the server connections per database
	// and user (0: PgBouncer's default, 20). It is capacity, not
	// compatibility: a test may make it small to make clients share a
	// server connection, or large for a fleet of many sessions.
	PoolSize int
}

// Bouncer is a running PgBouncer.
type Bouncer struct {
	Mode string
	port int
	out  *syncbuf.Buffer
	done chan struct{} // closed once the process has exited
}

// Start starts a PgBouncer in front of the server of serverURL (any URL
// of it: the database part does not matter, every database of the server
// is pooled under its own name, for the URL's user) and stops it when
// the test ends, logging its output should the test have failed.
func Start(t testing.TB, serverURL string, opts Options) *Bouncer {
	t.Helper()
	if testing.Short() {
		t.Skip("runs fleet through a PgBouncer of its own: runs without -short")
	}
	bin := binary()
	if bin == "" {
		if os.Getenv(EnvRequire) == "all" {
			t.Fatal("pgbouncer is required (" + EnvRequire + "=all): install it (apt-get install pgbouncer)")
		}
		t.Skip("pgbouncer is not installed (apt-get install pgbouncer): this test runs fleet through it")
	}
	if opts.Mode != Session && opts.Mode != Transaction {
		t.Fatalf("pgbouncertest: pool mode %q, want %q or %q", opts.Mode, Session, Transaction)
	}
	server, err := pgconn.ParseConfig(serverURL)
	if err != nil {
		t.Fatalf("pgbouncertest: parse the server's URL: %v", err)
	}
	// PgBouncer refuses to run as root: then it runs as postgres, which
	// must be able to read its directory.
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		if cred, err = postgresCredential(); err != nil {
			t.Fatalf("pgbouncertest: %v", err)
		}
	}
	dir, err := os.MkdirTemp("", "fleet-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	users := fmt.Sprintf("%q \"\"\n", server.User)
	if err := os.WriteFile(filepath.Join(dir, "users.txt"), []byte(users), 0o644); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		b, err := start(t, bin, dir, cred, server, opts)
		if err == nil {
			return b
		}
		if attempt == 5 || !strings.Contains(err.Error(), "in use") {
			t.Fatalf("pgbouncertest: %v", err)
		}
		// Another process took the free port meanwhile: take another.
	}
}

// start runs one PgBouncer on a free port and waits until it listens.
func start(t testing.TB, bin, dir string, cred *syscall.Credential, server *pgconn.Config, opts Options) (*Bouncer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	var ini strings.Builder
	fmt.Fprintf(&ini, "[databases]\n* = host=%s port=%d\n\n[pgbouncer]\n", server.Host, server.Port)
	fmt.Fprintf(&ini, "listen_addr = 127.0.0.1\nlisten_port = %d\nunix_socket_dir =\n", port)
	fmt.Fprintf(&ini, "auth_type = trust\nauth_file = %s\npool_mode = %s\n", filepath.Join(dir, "users.txt"), opts.Mode)
	if opts.PoolSize > 0 {
		fmt.Fprintf(&ini, "default_pool_size = %d\n", opts.PoolSize)
	}
	iniPath := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(iniPath, []byte(ini.String()), 0o644); err != nil {
		return nil, err
	}
	b := &Bouncer{Mode: opts.Mode, port: port, out: &syncbuf.Buffer{}, done: make(chan struct{})}
	cmd := exec.Command(bin, iniPath)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = b.out, b.out
	cmd.SysProcAttr = sysProcAttr(cred)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		_ = cmd.Wait()
		close(b.done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-b.done:
			return nil, fmt.Errorf("pgbouncer exited at start (%s): %s", cmd.ProcessState, strings.TrimSpace(b.out.String()))
		default:
		}
		conn, err := net.DialTimeout("tcp", b.addr(), time.Second)
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-b.done
			return nil, fmt.Errorf("pgbouncer does not listen on %s after 10 s: %s", b.addr(), b.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(func() {
		// SIGTERM: PgBouncer's immediate shutdown.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-b.done
		}
		if t.Failed() {
			t.Logf("pgbouncer (%s mode) output:\n%s", b.Mode, b.out.String())
		}
	})
	return b, nil
}

func (b *Bouncer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// URL returns u, a URL of the server behind the bouncer, pointed at the
// bouncer instead: the same user, database and parameters.
func (b *Bouncer) URL(t testing.TB, u string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil || parsed.Scheme == "" {
		t.Fatalf("pgbouncertest: %q is not a URL", u)
	}
	q := parsed.Query()
	q.Del("host")
	q.Del("port")
	q.Set("sslmode", "disable")
	parsed.Host = b.addr()
	parsed.RawQuery = q.Encode()
	return parsed.String()
}

// Output is what PgBouncer has logged so far.
func (b *Bouncer) Output() string { return b.out.String() }

// binary finds pgbouncer: on PATH, else where Debian and a source build
// install it.
func binary() string {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// freePort returns a TCP port of 127.0.0.1 nobody listens on right now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// postgresCredential returns the credentials of the OS user postgres.
func postgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer refuses to run as root and looking up the OS user postgres failed: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("uid %q of OS user postgres: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("gid %q of OS user postgres: %w", u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
