package integration

// How a program's session ends (issue 34): Close frees its holds at once;
// a program that ends without Close (Go has no exit hook), or is killed
// with SIGKILL, leaves them to the broker's grace, 5 s by default. The
// program is internal/lockchild, built once by the first test that needs
// it.

import (
	"bufio"
	"errors"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	lockbroker "github.com/lockbroker/lockbroker/clients/go"
)

var (
	childOnce sync.Once
	childBin  string
	childErr  error
)

// buildChild builds internal/lockchild into a temp dir, once per test run.
func buildChild(t *testing.T) string {
	t.Helper()
	childOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lockchild-")
		if err != nil {
			childErr = err
			return
		}
		childBin = filepath.Join(dir, "lockchild")
		gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
		out, err := exec.Command(gobin, "build", "-o", childBin, "../internal/lockchild").CombinedOutput()
		if err != nil {
			childErr = errors.New("go build lockchild: " + err.Error() + "\n" + string(out))
		}
	})
	if childErr != nil {
		t.Fatal(childErr)
	}
	return childBin
}

// child runs lockchild on key in mode and returns it once it printed that
// it holds the key; it is killed when the test ends.
func child(t *testing.T, addr, key, mode string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(buildChild(t), addr, key, mode)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if !strings.HasPrefix(line, "held ") {
		t.Fatalf("the child did not take %s: %q %v", key, line, err)
	}
	return cmd
}

// untilFree is how long until nobody holds key (asked every 20 ms); false
// if not within d.
func untilFree(t *testing.T, c *lockbroker.Client, key string, d time.Duration) (time.Duration, bool) {
	t.Helper()
	start := time.Now()
	for time.Since(start) < d {
		st, err := c.Owner(ctx(t, 5*time.Second), key)
		if err != nil {
			t.Fatal(err)
		}
		if st.Kind == lockbroker.Free {
			return time.Since(start), true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return d, false
}

func TestCloseFreesTheHoldsAtOnce(t *testing.T) {
	e := setup(t, "broker b1")
	watcher := e.client(lockbroker.Config{}, "b1")
	cmd := child(t, e.broker("b1").Addr(), "jobs:closed", "close")
	if d, ok := untilFree(t, watcher, "jobs:closed", 5*time.Second); !ok || d > time.Second {
		t.Fatalf("free %v after the child's Close (ok %v); the grace is %v", d, ok, lockbroker.DefaultGrace)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}

// A program that ends without Close, and one killed with SIGKILL: the
// broker keeps the holds for the grace (a RESUME could come), then frees
// them.
func testFreedWhenTheGraceRunsOut(t *testing.T, mode string) {
	e := setup(t, "broker b1")
	watcher := e.client(lockbroker.Config{}, "b1")
	cmd := child(t, e.broker("b1").Addr(), "jobs:"+mode, mode)
	start := time.Now()
	if mode == "wait" {
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	_ = cmd.Wait()
	time.Sleep(time.Second)
	if st, err := watcher.Owner(ctx(t, 5*time.Second), "jobs:"+mode); err != nil || st.Kind != lockbroker.Exclusive {
		t.Fatalf("1 s after the end: %v %v; the grace keeps it", st, err)
	}
	if _, ok := untilFree(t, watcher, "jobs:"+mode, 8*time.Second); !ok {
		t.Fatal("never freed")
	}
	grace := lockbroker.DefaultGrace
	if d := time.Since(start); d < grace-time.Second || d > grace+1500*time.Millisecond {
		t.Fatalf("freed %v after the end; the default grace is %v", d, grace)
	}
}

func TestWithoutCloseFreedWhenTheGraceRunsOut(t *testing.T) { testFreedWhenTheGraceRunsOut(t, "noclose") }

func TestKilledFreedWhenTheGraceRunsOut(t *testing.T) { testFreedWhenTheGraceRunsOut(t, "wait") }

// Done and Err: a session without a grace ends with its connection; its
// holds are lost at once (not after the reconnect budget), and a new
// session takes its place once a broker answers.
func TestSessionDoneWhenLost(t *testing.T) {
	e := setup(t, "broker b1", "broker b2")
	var logged lines
	c := e.client(lockbroker.Config{Grace: lockbroker.NoGrace, Logger: log.New(&logged, "", 0)}, "b1", "b2")
	s := c.Session()
	h, err := c.Lock(ctx(t, 5*time.Second), "jobs:done")
	if err != nil {
		t.Fatal(err)
	}
	if s.Err() != nil || c.Err() != nil {
		t.Fatal("a live session has no error")
	}
	e.step("kill b1")
	waitClosed(t, s.Done(), 3*time.Second, "the session's Done closed")
	if err := s.Err(); !errors.Is(err, lockbroker.ErrSessionLost) {
		t.Fatalf("Err %v", err)
	}
	waitClosed(t, h.Lost(), time.Second, "its hold lost")
	err = h.Unlock(ctx(t, time.Second))
	if !errors.Is(err, lockbroker.ErrLockLost) || !errors.Is(err, lockbroker.ErrSessionLost) ||
		!strings.HasPrefix(err.Error(), "jobs:done: the lock was lost (token ") {
		t.Fatalf("Unlock: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.Session() == s && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c.Session() == s || c.Err() != nil || c.Session().ClientID() == s.ClientID() {
		t.Fatal("no new session on b2")
	}
	c.Close()
	waitClosed(t, c.Done(), time.Second, "Close ends the session")
	if !errors.Is(c.Err(), lockbroker.ErrClosed) {
		t.Fatalf("after Close: %v", c.Err())
	}
	if l := logged.String(); !strings.Contains(l, "the session had no grace: its holds are lost") ||
		!strings.Contains(l, "lockbroker: jobs:done: the lock was lost (token ") {
		t.Fatalf("the log: %s", l)
	}
}

// lines is what a *log.Logger writes, kept for the test to read.
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
