package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fleet-go/fleet/spawner"
)

// benchProc is a process the bench started itself: a master for the idle
// scenario, a fleet:work for a scale cell.
type benchProc struct {
	cmd   *exec.Cmd
	ready chan struct{} // closed at the first @fleet ready report
	done  chan struct{} // closed once the process is reaped
	err   error
	once  sync.Once
}

// startProc starts the app's executable with args and env in the app's
// directory. Protocol lines on its stdout are read (ready is noticed); every
// other line of stdout and stderr goes to the bench's stderr.
func (b *bench) startProc(args, env []string) (*benchProc, error) {
	c := exec.Command(b.exe, args...)
	c.Dir = b.opts.Dir
	c.Env = env
	c.Stderr = b.stderr
	c.SysProcAttr = benchSysProcAttr()
	out, err := c.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", strings.Join(args, " "), err)
	}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", strings.Join(args, " "), err)
	}
	p := &benchProc{cmd: c, ready: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		var readyOnce sync.Once
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if !spawner.IsProtocolLine(line) {
				fmt.Fprintln(b.stderr, line)
				continue
			}
			if rep, err := spawner.ParseReport(line); err == nil && rep.Type == spawner.ReportReady {
				readyOnce.Do(func() { close(p.ready) })
			}
		}
		_, _ = io.Copy(io.Discard, out)
		p.err = c.Wait()
	}()
	return p, nil
}

// exited returns an error once the process has exited.
func (p *benchProc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v", p.cmd.Args[1], p.err)
	default:
		return nil
	}
}

// waitReady waits for the ready report, the process's end or ctx.
func (p *benchProc) waitReady(ctx context.Context, within time.Duration) error {
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-p.ready:
		return nil
	case <-p.done:
		return fmt.Errorf("%s exited before it was ready: %v", p.cmd.Args[1], p.err)
	case <-t.C:
		return fmt.Errorf("%s not ready within %s", p.cmd.Args[1], within)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop asks the process to stop (SIGTERM), waits up to 30 s, then kills
// it. It returns the process's exit error, if any besides the signal.
func (p *benchProc) stop() error {
	p.once.Do(func() {
		select {
		case <-p.done:
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(30 * time.Second)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p.err
}

// ---- /proc

// clockTicks is USER_HZ, the unit of utime and stime in /proc (100 on every
// Linux the bench runs on; Go cannot ask sysconf without cgo).
const clockTicks = 100

// procCPU returns the user+system CPU time pid has used.
func procCPU(pid int) (time.Duration, error) {
	f, err := procStatFields(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// procStatFields returns the fields of /proc/pid/stat after the command
// name: state, ppid, ...
func procStatFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, fmt.Errorf("read process %d: %w", pid, err)
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:]), nil
}

// procChildren returns the live children of pid.
func procChildren(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	want := strconv.Itoa(pid)
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := procStatFields(child)
		if err == nil && len(f) > 1 && f[1] == want && f[0] != "Z" {
			out = append(out, child)
		}
	}
	slices.Sort(out)
	return out
}

// procPeakRSSMB returns VmHWM, the peak resident memory of pid, in MB.
func procPeakRSSMB(pid int) (float64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, fmt.Errorf("read process %d: %w", pid, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("process %d VmHWM %q: %w", pid, rest, err)
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("process %d: no VmHWM", pid)
}

// procTreeCPU returns the user+system CPU time pid has used, with that of
// its children: the reaped ones (cutime, cstime) and the live ones, and
// theirs in turn.
func procTreeCPU(pid int) (time.Duration, error) {
	f, err := procStatFields(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 15 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	var ticks int64
	for _, i := range []int{11, 12, 13, 14} { // utime, stime, cutime, cstime
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	d := time.Duration(ticks) * time.Second / clockTicks
	for _, c := range procChildren(pid) {
		if cd, err := procTreeCPU(c); err == nil { // a child that just exited is in cutime soon
			d += cd
		}
	}
	return d, nil
}

// procIsPostgres reports whether pid is a PostgreSQL server process on this
// host.
func procIsPostgres(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.TrimSpace(string(b)) == "postgres"
}
