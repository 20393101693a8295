// Package pgcluster starts a private PostgreSQL server from the binaries
// installed on the machine (initdb, pg_ctl, postgres). The server listens on
// a Unix socket only (and on 127.0.0.1 when given a port) and is tuned for
// throwaway data: fsync, synchronous commit and full-page writes are off.
// Tests use it through pgtest when no other server is available, and
// fleet's demo command uses it to run without any database set up. The
// fault suite also makes streaming standbys of it (StartStandby), promotes
// them (Promote) and crashes primaries (Crash).
//
// When the process runs as root (PostgreSQL refuses to), the server runs as
// the "postgres" OS user: initdb, pg_ctl and postgres get that user's
// credentials, and the data and socket directories are chowned to it. Every
// directory above them must then be traversable by that user (mode 0755 or
// so); Start reports the first one that is not.
package pgcluster

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// port is the port number the server is told to use unless Options.Port
// sets one. With TCP disabled it only names the socket file
// (.s.PGSQL.5432), so clusters in different socket directories never
// clash.
const port = 5432

// maxSocketPath is the longest socket path Start accepts: sun_path holds 108
// bytes on Linux and 104 on macOS, including the terminating NUL.
const maxSocketPath = 103

// readyTimeout bounds how long Start waits for the server to accept
// connections, and how long pg_ctl waits for a start or stop.
const readyTimeout = 30 * time.Second

// FindBinaries returns the directory holding initdb and pg_ctl: the one found
// on PATH first (following a symlink to the real installation when initdb is
// one), else the newest /usr/lib/postgresql/<version>/bin (versions compared
// numerically, so 10 is newer than 9.6), else an error explaining how to
// install PostgreSQL or point fleet at an existing database.
func FindBinaries() (string, error) {
	if initdb, err := exec.LookPath("initdb"); err == nil {
		var dirs []string
		if real, err := filepath.EvalSymlinks(initdb); err == nil {
			dirs = append(dirs, filepath.Dir(real))
		}
		dirs = append(dirs, filepath.Dir(initdb))
		for _, dir := range dirs {
			if hasBinaries(dir) {
				return dir, nil
			}
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	type candidate struct {
		dir     string
		version []int
	}
	var found []candidate
	for _, dir := range matches {
		v, ok := parseVersion(filepath.Base(filepath.Dir(dir)))
		if ok && hasBinaries(dir) {
			found = append(found, candidate{dir, v})
		}
	}
	if len(found) > 0 {
		newest := slices.MaxFunc(found, func(a, b candidate) int { return slices.Compare(a.version, b.version) })
		return newest.dir, nil
	}
	return "", errors.New("PostgreSQL server binaries (initdb, pg_ctl) not found on PATH nor in /usr/lib/postgresql/*/bin: " +
		"install them (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql) " +
		"or set a database URL to use an existing server")
}

// LibraryDir returns the directory the installed server loads extension
// libraries from: what pg_config --pkglibdir says, pg_config being the one
// beside the binaries FindBinaries finds, else the "lib" directory beside
// those binaries (Debian's layout), when it exists. An extension that a
// server must preload (shared_preload_libraries) is installed when its
// library is there.
func LibraryDir() (string, error) {
	bin, err := FindBinaries()
	if err != nil {
		return "", err
	}
	if out, err := exec.Command(filepath.Join(bin, "pg_config"), "--pkglibdir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); dir != "" {
			return dir, nil
		}
	}
	dir := filepath.Join(filepath.Dir(bin), "lib")
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("no library directory for the PostgreSQL binaries in %s: no pg_config there, and no %s", bin, dir)
	}
	return dir, nil
}

// hasBinaries reports whether dir holds initdb and pg_ctl.
func hasBinaries(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// parseVersion parses a directory name such as "15" or "9.6".
func parseVersion(s string) ([]int, bool) {
	var v []int
	for part := range strings.SplitSeq(s, ".") {
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 {
			return nil, false
		}
		v = append(v, n)
	}
	return v, true
}

// Options configures Start.
type Options struct {
	// DataDir is the cluster's data directory; required. Start creates it
	// and runs initdb when it is missing or empty, and reuses the cluster in
	// it otherwise: data is kept between runs.
	DataDir string
	// SocketDir is the directory of the server's Unix socket. It defaults to
	// DataDir, unless the socket path would then exceed the operating
	// system's limit (about 103 bytes): Start then creates a short
	// temporary directory (under $TMPDIR, or /tmp when that is long too)
	// and removes it at Stop. A SocketDir that does not exist is created
	// (and, as root, given to the postgres user); one that exists must be
	// writable by the server's user. Two clusters must not share a
	// SocketDir, and its path must leave room for "/.s.PGSQL.5432".
	SocketDir string
	// Logger receives progress and recovery messages; nil discards them.
	Logger *slog.Logger
	// LogFile is the server's log. It defaults to DataDir + ".log", beside
	// the data directory (initdb wants an empty directory).
	LogFile string
	// Port, when set, makes the server listen on 127.0.0.1:Port as well as
	// on its socket (named after that port), and URL speaks TCP. Zero: the
	// socket only.
	Port int
	// Settings are extra server settings, "name=value" each, given to the
	// server on its command line after the defaults, which they override
	// (synchronous_commit=on, synchronous_standby_names=..., ...).
	Settings []string
}

// Cluster is a running PostgreSQL server started by Start.
type Cluster struct {
	binDir     string
	dataDir    string
	socketDir  string
	tempSocket bool // socketDir was created by Start; removed by Stop
	logFile    string
	log        *slog.Logger
	cred       *syscall.Credential // nil: run as the current user
	port       int                 // the server's port: Options.Port, or port
	tcp        bool                // listening on 127.0.0.1:port
	settings   []string            // Options.Settings

	mu      sync.Mutex
	stopped bool
}

// Start initialises opts.DataDir if needed (initdb -U postgres --auth=trust
// -E UTF8 --locale=C --no-sync) and starts a server on it, listening on a
// Unix socket only, with fsync, synchronous_commit and full_page_writes off
// and max_connections=300, then returns once the server accepts connections
// (at most 30 s, or until ctx is done).
//
// If the data directory is still held by a server of an earlier run (its
// process was killed and the server outlived it), Start stops that server
// with pg_ctl and starts a fresh one, so the settings and socket directory
// are always the ones of this call. A postmaster.pid left by a server that is
// no longer running is handled by pg_ctl and postgres themselves. Errors name
// the step that failed and end with the last lines of the server log.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	return startWith(ctx, opts, nil)
}

// StartStandby makes opts.DataDir a streaming standby of primary and starts
// it: when the directory holds no cluster yet, it is filled by a base
// backup of primary (pg_basebackup -R over primary's socket, WAL streamed),
// and the standby streams from primary as application_name name, which
// primary's synchronous_standby_names may list to make it synchronous. A
// directory that holds a cluster already is started as it is. The standby
// accepts read-only sessions (hot standby) until Promote.
func StartStandby(ctx context.Context, primary *Cluster, name string, opts Options) (*Cluster, error) {
	if primary == nil || name == "" {
		return nil, errors.New("start standby: a primary and a name are needed")
	}
	conninfo := fmt.Sprintf("host=%s port=%d user=postgres application_name=%s",
		conninfoQuote(primary.socketDir), primary.port, conninfoQuote(name))
	opts.Settings = append([]string{"primary_conninfo=" + conninfo}, opts.Settings...)
	return startWith(ctx, opts, func(ctx context.Context, c *Cluster) error {
		c.log.Info("taking a base backup for a standby", "dir", c.dataDir, "primary", primary.dataDir)
		began := time.Now()
		out, err := c.run(ctx, "pg_basebackup", "-D", c.dataDir, "-h", primary.socketDir, "-p", strconv.Itoa(primary.port),
			"-U", "postgres", "-X", "stream", "-c", "fast", "--no-sync", "-R")
		if err != nil {
			return fmt.Errorf("start standby: pg_basebackup of %s: %w\n%s%s", primary.dataDir, err, out, primary.logTail())
		}
		c.log.Info("took a base backup", "dir", c.dataDir, "took", time.Since(began).Round(time.Millisecond))
		return nil
	})
}

// startWith is Start with create filling an empty data directory (nil:
// initdb).
func startWith(ctx context.Context, opts Options, create func(context.Context, *Cluster) error) (*Cluster, error) {
	if opts.DataDir == "" {
		return nil, errors.New("start postgres: Options.DataDir is required")
	}
	for _, kv := range opts.Settings {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, fmt.Errorf("start postgres: setting %q is not name=value", kv)
		}
	}
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("start postgres: port %d out of range", opts.Port)
	}
	dataDir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("start postgres: data directory %q: %w", opts.DataDir, err)
	}
	binDir, err := FindBinaries()
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	c := &Cluster{
		binDir:   binDir,
		dataDir:  dataDir,
		logFile:  opts.LogFile,
		log:      opts.Logger,
		port:     cmp.Or(opts.Port, port),
		tcp:      opts.Port != 0,
		settings: opts.Settings,
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.logFile == "" {
		c.logFile = dataDir + ".log"
	}
	if c.logFile, err = filepath.Abs(c.logFile); err != nil {
		return nil, fmt.Errorf("start postgres: log file %q: %w", opts.LogFile, err)
	}
	if os.Geteuid() == 0 {
		if c.cred, err = postgresCredential(); err != nil {
			return nil, fmt.Errorf("start postgres: running as root: %w", err)
		}
	}

	if err := c.prepareDataDir(ctx, create); err != nil {
		return nil, err
	}
	if err := c.prepareSocketDir(opts.SocketDir); err != nil {
		return nil, err
	}
	if err := c.prepareLogFile(); err != nil {
		c.removeTempSocket()
		return nil, err
	}
	if err := c.recoverRunning(ctx); err != nil {
		c.removeTempSocket()
		return nil, err
	}
	if err := c.start(ctx); err != nil {
		c.removeTempSocket()
		return nil, err
	}
	return c, nil
}

// conninfoQuote quotes a value of a libpq connection string.
func conninfoQuote(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// postgresCredential returns the credentials of the "postgres" OS user.
func postgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root and looking up the OS user postgres failed: %w", err)
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

// prepareDataDir creates the data directory when missing and, when it
// holds no cluster yet, runs create (nil: initdb) on it.
func (c *Cluster) prepareDataDir(ctx context.Context, create func(context.Context, *Cluster) error) error {
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
		return c.checkTraversable(c.dataDir)
	}
	// Parents are made traversable (0755): the server may run as another
	// user than this process. The data directory itself stays private.
	if err := os.MkdirAll(filepath.Dir(c.dataDir), 0o755); err != nil {
		return fmt.Errorf("start postgres: create the data directory's parent: %w", err)
	}
	if err := os.MkdirAll(c.dataDir, 0o700); err != nil {
		return fmt.Errorf("start postgres: create data directory: %w", err)
	}
	entries, err := os.ReadDir(c.dataDir)
	if err != nil {
		return fmt.Errorf("start postgres: read data directory: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("start postgres: data directory %s is neither empty nor a PostgreSQL cluster (no PG_VERSION)", c.dataDir)
	}
	if err := c.chown(c.dataDir); err != nil {
		return err
	}
	if err := c.checkTraversable(c.dataDir); err != nil {
		return err
	}
	if create != nil {
		return create(ctx, c)
	}
	c.log.Info("initialising PostgreSQL data directory", "dir", c.dataDir, "bin", c.binDir)
	began := time.Now()
	out, err := c.run(ctx, "initdb", "-D", c.dataDir, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	if err != nil {
		return fmt.Errorf("start postgres: initdb %s: %w\n%s", c.dataDir, err, out)
	}
	c.log.Info("initialised PostgreSQL data directory", "dir", c.dataDir, "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// prepareSocketDir settles the socket directory, creating a short temporary
// one when the default would make the socket path too long.
func (c *Cluster) prepareSocketDir(dir string) error {
	sockName := "/.s.PGSQL." + strconv.Itoa(c.port)
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return fmt.Errorf("start postgres: socket directory %q: %w", dir, err)
		}
		if len(abs)+len(sockName) > maxSocketPath {
			return fmt.Errorf("start postgres: socket directory %s is too long for a Unix socket path (at most %d bytes with %s)", abs, maxSocketPath-len(sockName), sockName)
		}
		if _, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) {
			if err := os.MkdirAll(abs, 0o700); err != nil {
				return fmt.Errorf("start postgres: create socket directory: %w", err)
			}
			if err := c.chown(abs); err != nil {
				return err
			}
		}
		c.socketDir = abs
		return c.checkTraversable(abs)
	}
	if len(c.dataDir)+len(sockName) <= maxSocketPath {
		c.socketDir = c.dataDir
		return nil
	}
	base := os.TempDir()
	if len(base)+len("/pgsock-1234567890")+len(sockName) > maxSocketPath {
		base = "/tmp"
	}
	tmp, err := os.MkdirTemp(base, "pgsock-")
	if err != nil {
		return fmt.Errorf("start postgres: create short socket directory: %w", err)
	}
	c.socketDir, c.tempSocket = tmp, true
	if err := c.chown(tmp); err != nil {
		c.removeTempSocket()
		return err
	}
	if err := c.checkTraversable(tmp); err != nil {
		c.removeTempSocket()
		return err
	}
	c.log.Info("data directory path too long for a socket path, using a temporary socket directory", "dir", tmp)
	return nil
}

// prepareLogFile creates the server log so that the server's user can
// append to it.
func (c *Cluster) prepareLogFile() error {
	f, err := os.OpenFile(c.logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("start postgres: create server log: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("start postgres: create server log: %w", err)
	}
	if err := c.chown(c.logFile); err != nil {
		return err
	}
	return c.checkTraversable(filepath.Dir(c.logFile))
}

// recoverRunning stops a server that still holds the data directory, left by
// an earlier run whose process was killed before it could stop it.
func (c *Cluster) recoverRunning(ctx context.Context) error {
	pidFile := filepath.Join(c.dataDir, "postmaster.pid")
	pid, ok := readPid(pidFile)
	if !ok || !processAlive(pid) {
		// No pid file, or a stale one: postgres replaces it itself.
		return nil
	}
	if !isPostgres(pid) {
		// The pid was reused by an unrelated process; postgres might take
		// that for a running server, so drop the stale file.
		c.log.Warn("removing stale postmaster.pid whose pid now belongs to another process", "pid", pid, "file", pidFile)
		if err := os.Remove(pidFile); err != nil {
			return fmt.Errorf("start postgres: remove stale %s: %w", pidFile, err)
		}
		return nil
	}
	c.log.Warn("a PostgreSQL server of an earlier run still holds the data directory; stopping it", "pid", pid, "dir", c.dataDir)
	if _, err := c.pgCtl(ctx, "stop", "-m", "fast"); err != nil {
		c.log.Warn("fast shutdown of the earlier server failed; trying immediate shutdown", "err", err)
		if _, err := c.pgCtl(ctx, "stop", "-m", "immediate"); err != nil {
			return fmt.Errorf("start postgres: stop the earlier server (pid %d) holding %s: %w%s", pid, c.dataDir, err, c.logTail())
		}
	}
	return nil
}

// start runs pg_ctl start and waits until the server accepts connections.
func (c *Cluster) start(ctx context.Context) error {
	listen := ""
	if c.tcp {
		listen = "127.0.0.1"
	}
	opts := []string{
		"-p", strconv.Itoa(c.port),
		"-c", "listen_addresses=" + listen,
		"-c", "unix_socket_directories=" + c.socketDir,
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=300",
	}
	for _, kv := range c.settings {
		opts = append(opts, "-c", kv)
	}
	quoted := make([]string, len(opts))
	for i, o := range opts {
		quoted[i] = shellQuote(o) // pg_ctl hands -o to /bin/sh
	}
	began := time.Now()
	c.log.Info("starting PostgreSQL", "dir", c.dataDir, "socket_dir", c.socketDir, "log", c.logFile)
	if out, err := c.pgCtl(ctx, "start", "-l", c.logFile, "-o", strings.Join(quoted, " ")); err != nil {
		return fmt.Errorf("start postgres: pg_ctl start: %w\n%s%s", err, out, c.logTail())
	}
	if err := c.waitReady(ctx); err != nil {
		// Do not leave a server behind that nobody will stop.
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyTimeout)
		_, _ = c.pgCtl(stopCtx, "stop", "-m", "immediate")
		cancel()
		return fmt.Errorf("start postgres: %w%s", err, c.logTail())
	}
	c.log.Info("PostgreSQL is ready", "url", c.URL("postgres"), "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// waitReady polls the server with a pgx connection until it answers.
func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close(context.WithoutCancel(ctx))
			if err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("server not accepting connections on %s: %w (last error: %v)", c.socketDir, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// URL returns the connection URL of database on this cluster, such as
// postgres://postgres@/fleet?host=%2Ftmp%2Fx%2Fdata&port=5432&sslmode=disable,
// or postgres://postgres@127.0.0.1:PORT/fleet?sslmode=disable for a
// cluster started with a Port. The port is spelled out so that a PGPORT in
// the environment does not redirect the connection.
func (c *Cluster) URL(database string) string {
	return MultiHostURL(database, "", c)
}

// MultiHostURL returns one connection URL of database over every cluster,
// in order: postgres://postgres@127.0.0.1:P1,127.0.0.1:P2/db?... when all
// of them listen on TCP, else their sockets as host=/a,/b&port=... A
// client tries the hosts in turn; with targetSessionAttrs (read-write,
// primary, ...; empty: none) it keeps the first that qualifies, as libpq
// and pgx do with target_session_attrs.
func MultiHostURL(database, targetSessionAttrs string, clusters ...*Cluster) string {
	q := url.Values{}
	tcp := len(clusters) > 0
	for _, c := range clusters {
		tcp = tcp && c.tcp
	}
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/" + database}
	var hosts, ports []string
	for _, c := range clusters {
		if tcp {
			hosts = append(hosts, "127.0.0.1:"+strconv.Itoa(c.port))
			continue
		}
		hosts, ports = append(hosts, c.socketDir), append(ports, strconv.Itoa(c.port))
	}
	if tcp {
		u.Host = strings.Join(hosts, ",")
	} else {
		q.Set("host", strings.Join(hosts, ","))
		q.Set("port", strings.Join(ports, ","))
	}
	q.Set("sslmode", "disable")
	if targetSessionAttrs != "" {
		q.Set("target_session_attrs", targetSessionAttrs)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// DataDir returns the cluster's absolute data directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// LogFile returns the path of the server's log.
func (c *Cluster) LogFile() string { return c.logFile }

// SocketDir returns the directory of the server's Unix socket: the data
// directory, SocketDir of the Options, or the temporary directory Start
// created when the data directory's path was too long.
func (c *Cluster) SocketDir() string { return c.socketDir }

// Port returns the server's port: the TCP port of a cluster started with
// Options.Port, else the one its socket is named after.
func (c *Cluster) Port() int { return c.port }

// PostmasterPID returns the pid of the running server's postmaster.
func (c *Cluster) PostmasterPID() (int, error) {
	pid, ok := readPid(filepath.Join(c.dataDir, "postmaster.pid"))
	if !ok || !running(pid) {
		return 0, fmt.Errorf("postgres %s is not running", c.dataDir)
	}
	return pid, nil
}

// Promote turns a standby (see StartStandby) into a primary accepting
// writes (pg_ctl promote) and returns once it does.
func (c *Cluster) Promote(ctx context.Context) error {
	if out, err := c.pgCtl(ctx, "promote"); err != nil {
		return fmt.Errorf("promote postgres %s: %w\n%s%s", c.dataDir, err, out, c.logTail())
	}
	c.log.Info("promoted PostgreSQL", "dir", c.dataDir)
	return nil
}

// crashGrace is how long Crash lets the server's processes obey the
// immediate shutdown before it kills those still there.
const crashGrace = 100 * time.Millisecond

// Crash stops the server as a crash of its host would, as far as its
// clients and standbys can tell: an immediate shutdown (SIGQUIT to the
// postmaster: no checkpoint, every session cut), and SIGKILL after
// crashGrace for every server process still there, such as one stopped
// with SIGSTOP (a stalled WAL sender then never sends what it held back).
// It returns once the postmaster has exited; like Stop it then does
// nothing more. The data directory is kept, and a Start on it recovers.
func (c *Cluster) Crash(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	pid, ok := readPid(filepath.Join(c.dataDir, "postmaster.pid"))
	if ok && running(pid) {
		kids := childPIDs(pid)
		if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
			return fmt.Errorf("crash postgres %s: %w", c.dataDir, err)
		}
		t := time.NewTimer(crashGrace)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("crash postgres %s: %w", c.dataDir, ctx.Err())
		case <-t.C:
		}
		for _, k := range kids {
			if running(k) {
				_ = syscall.Kill(k, syscall.SIGKILL)
			}
		}
		wctx, cancel := context.WithTimeout(ctx, readyTimeout)
		defer cancel()
		for running(pid) {
			select {
			case <-wctx.Done():
				return fmt.Errorf("crash postgres %s: the postmaster (pid %d) did not exit: %w", c.dataDir, pid, wctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
		c.log.Info("crashed PostgreSQL", "dir", c.dataDir)
	}
	c.removeTempSocket()
	c.stopped = true
	return nil
}

// StopDataDir stops the server running on dataDir that an earlier process
// started and left running on purpose (Start without Stop), with pg_ctl stop
// -m fast, and waits until it has exited. It reports whether a server was
// running; the data directory is kept. A temporary socket directory that
// Start created for that server is not known here: the caller removes it.
func StopDataDir(ctx context.Context, dataDir string, logger *slog.Logger) (bool, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return false, fmt.Errorf("stop postgres: data directory %q: %w", dataDir, err)
	}
	pid, ok := readPid(filepath.Join(abs, "postmaster.pid"))
	if !ok || !processAlive(pid) || !isPostgres(pid) {
		return false, nil
	}
	binDir, err := FindBinaries()
	if err != nil {
		return false, fmt.Errorf("stop postgres: %w", err)
	}
	c := &Cluster{binDir: binDir, dataDir: abs, logFile: abs + ".log", log: logger}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if os.Geteuid() == 0 {
		if c.cred, err = postgresCredential(); err != nil {
			return false, fmt.Errorf("stop postgres: running as root: %w", err)
		}
	}
	if err := c.Stop(ctx); err != nil {
		return true, err
	}
	return true, nil
}

// Stop shuts the server down (pg_ctl stop -m fast) and waits until it has
// exited. The data directory is kept. Calling Stop again, or on a server that
// is no longer running, returns nil.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	pid, ok := readPid(filepath.Join(c.dataDir, "postmaster.pid"))
	if ok && processAlive(pid) {
		began := time.Now()
		if out, err := c.pgCtl(ctx, "stop", "-m", "fast"); err != nil {
			// Another hand may have stopped it meanwhile.
			if pid, ok := readPid(filepath.Join(c.dataDir, "postmaster.pid")); ok && processAlive(pid) {
				return fmt.Errorf("stop postgres %s: %w\n%s%s", c.dataDir, err, out, c.logTail())
			}
		}
		c.log.Info("stopped PostgreSQL", "dir", c.dataDir, "took", time.Since(began).Round(time.Millisecond))
	}
	c.removeTempSocket()
	c.stopped = true
	return nil
}

// removeTempSocket removes the socket directory if Start created it.
func (c *Cluster) removeTempSocket() {
	if c.tempSocket {
		if err := os.RemoveAll(c.socketDir); err != nil {
			c.log.Warn("removing temporary socket directory failed", "dir", c.socketDir, "err", err)
		}
	}
}

// pgCtl runs pg_ctl on the data directory, waiting for the action to finish.
func (c *Cluster) pgCtl(ctx context.Context, action string, args ...string) ([]byte, error) {
	all := append([]string{action, "-D", c.dataDir, "-w", "-t", strconv.Itoa(int(readyTimeout / time.Second))}, args...)
	return c.run(ctx, "pg_ctl", all...)
}

// run runs one PostgreSQL program as the server's user and returns its
// combined output. PG* variables are removed from its environment so that
// none of them (PGPORT, PGDATA, ...) changes what the cluster does.
func (c *Cluster) run(ctx context.Context, program string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, program), args...)
	cmd.Dir = "/" // the server's user may not be able to enter ours
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
		cmd.Env = append(cmd.Env, "HOME="+c.dataDir, "USER=postgres", "LOGNAME=postgres")
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.Bytes(), err
}

// chown gives path to the server's user when the server runs as another one.
func (c *Cluster) chown(path string) error {
	if c.cred == nil {
		return nil
	}
	if err := os.Chown(path, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
		return fmt.Errorf("start postgres: give %s to OS user postgres: %w", path, err)
	}
	return nil
}

// checkTraversable reports the first directory above path that the server's
// user cannot enter, when the server runs as another user.
func (c *Cluster) checkTraversable(path string) error {
	if c.cred == nil {
		return nil
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("start postgres: %w", err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		mode := fi.Mode().Perm()
		traversable := mode&0o001 != 0 ||
			(ok && st.Uid == c.cred.Uid && mode&0o100 != 0) ||
			(ok && st.Gid == c.cred.Gid && mode&0o010 != 0)
		if !traversable {
			return fmt.Errorf("start postgres: directory %s (mode %v) is not traversable by OS user postgres, which runs the server because this process is root; make it 0755", dir, mode)
		}
		if dir == filepath.Dir(dir) {
			return nil
		}
	}
}

// logTail returns the last lines of the server log, for error messages.
func (c *Cluster) logTail() string {
	const maxLines = 20
	f, err := os.Open(c.logFile)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > 16<<10 {
		_, _ = f.Seek(-16<<10, io.SeekEnd)
	}
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > maxLines {
			lines = lines[1:]
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return "\nlast lines of " + c.logFile + ":\n" + strings.Join(lines, "\n")
}

// readPid reads the pid on the first line of a postmaster.pid file.
func readPid(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}

// processAlive reports whether a process with that pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// running reports whether pid is a live process: alive, and on Linux not
// a zombie waiting for a parent that does not reap it.
func running(pid int) bool {
	if !processAlive(pid) {
		return false
	}
	if runtime.GOOS != "linux" {
		return true
	}
	st, ok := procStat(pid)
	return !ok || (len(st) > 0 && st[0] != "Z")
}

// procStat returns the fields of /proc/PID/stat after the command name:
// the state, the parent's pid, ...
func procStat(pid int) ([]string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
	return strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])), true
}

// childPIDs returns the live children of pid (none where /proc is not).
func childPIDs(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procStat(child); ok && len(st) > 1 && st[1] == strconv.Itoa(pid) && st[0] != "Z" {
			out = append(out, child)
		}
	}
	return out
}

// isPostgres reports whether pid runs a postgres executable. Where that
// cannot be told (no /proc, or no permission), it assumes so.
func isPostgres(pid int) bool {
	if runtime.GOOS != "linux" {
		return true
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	return strings.HasPrefix(filepath.Base(exe), "postgres")
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
