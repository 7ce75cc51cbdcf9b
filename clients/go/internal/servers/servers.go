// Package servers drives the shared conformance helper,
// tests/conformance/servers.py: it starts Redis and brokers on free ports
// of 127.0.0.1, performs fault steps (kill -9 a broker, delete a key in
// Redis, ...) and tells their addresses, over JSON lines on its standard
// input and output. The helper stops everything it started by pid when
// its input ends, so a test binary that dies leaves nothing behind.
// Used by this library's integration tests and its conformance runner.
package servers

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Helper is one running servers.py.
type Helper struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	errs *tail

	mu sync.Mutex
}

// Broker is what the helper says of a broker it started.
type Broker struct {
	Name    string
	Host    string
	Port    int
	TLSPort int
	CA      string // the helper's CA certificate file ("" without tls)
	Version string // what its HELLO says (1.0.0, 1.2.0)
	Alive   bool
	PID     int
}

// Addr is the broker's plain address.
func (b Broker) Addr() string { return net.JoinHostPort(b.Host, strconv.Itoa(b.Port)) }

// TLSAddr is its TLS address.
func (b Broker) TLSAddr() string { return net.JoinHostPort(b.Host, strconv.Itoa(b.TLSPort)) }

// Speaks12 says whether it speaks protocol 1.2 or later.
func (b Broker) Speaks12() bool {
	p := strings.SplitN(b.Version, ".", 3)
	if len(p) < 2 {
		return false
	}
	major, _ := strconv.Atoi(p[0])
	minor, _ := strconv.Atoi(p[1])
	return major > 1 || (major == 1 && minor >= 2)
}

// RepoRoot finds the repository above the working directory (the folder
// holding tests/conformance/servers.py).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "tests", "conformance", "servers.py")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("tests/conformance/servers.py not found above the working directory")
		}
		dir = parent
	}
}

// Start runs the helper (python3; the broker is $LOCKBROKERD, else the
// repository's build/lockbrokerd) and waits for its ready line.
func Start() (*Helper, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	bin := os.Getenv("LOCKBROKERD")
	if bin == "" {
		bin = filepath.Join(root, "build", "lockbrokerd")
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("no broker binary %s (make -C %s build/lockbrokerd, or set LOCKBROKERD)", bin, root)
	}
	cmd := exec.Command("python3", filepath.Join(root, "tests", "conformance", "servers.py"), "--broker", bin)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	h := &Helper{cmd: cmd, in: in, out: bufio.NewReader(out), errs: &tail{}}
	cmd.Stderr = h.errs
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	first, err := h.read()
	if err != nil || first["ready"] != true {
		h.Close()
		return nil, fmt.Errorf("the helper did not start (%v, %v): %s", first, err, h.Log())
	}
	return h, nil
}

func (h *Helper) read() (map[string]interface{}, error) {
	line, err := h.out.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("the helper exited: %v", err)
	}
	var m map[string]interface{}
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		return nil, fmt.Errorf("the helper said %q: %v", line, err)
	}
	return m, nil
}

// Request sends one request object and returns the reply; a reply with
// "ok": false is an error.
func (h *Helper) Request(req map[string]interface{}) (map[string]interface{}, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, err := h.in.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("the helper is gone: %v", err)
	}
	m, err := h.read()
	if err != nil {
		return nil, err
	}
	if m["ok"] != true {
		return m, fmt.Errorf("%v", m["error"])
	}
	return m, nil
}

// Step performs a server step of the transcript grammar ("broker b1 tls",
// "kill b1", "redis del k", "sleep 200", "requires 1.2", "needs WATCH"):
// an error if the helper says it failed (a needs step fails when the
// broker lacks the word).
func (h *Helper) Step(line string) error {
	_, err := h.Request(map[string]interface{}{"op": "step", "line": line})
	return err
}

// Reset stops every server of the last test; the next broker step starts
// a fresh Redis and prefix.
func (h *Helper) Reset() error {
	_, err := h.Request(map[string]interface{}{"op": "reset"})
	return err
}

// Broker asks for a broker's address and state.
func (h *Helper) Broker(name string) (Broker, error) {
	m, err := h.Request(map[string]interface{}{"op": "broker", "name": name})
	if err != nil {
		return Broker{}, err
	}
	num := func(k string) int {
		f, _ := m[k].(float64)
		return int(f)
	}
	str := func(k string) string {
		s, _ := m[k].(string)
		return s
	}
	return Broker{Name: name, Host: str("host"), Port: num("port"), TLSPort: num("tls_port"),
		CA: str("ca"), Version: str("version"), Alive: m["alive"] == true, PID: num("pid")}, nil
}

// Main runs a test binary's tests with one helper for them all (set
// before they run, closed after); for TestMain.
func Main(m *testing.M, h **Helper) {
	var err error
	if *h, err = Start(); err != nil {
		fmt.Fprintln(os.Stderr, "the conformance helper:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := (*h).Close(); err != nil {
		fmt.Fprintln(os.Stderr, "the conformance helper:", err)
	}
	os.Exit(code)
}

// Close stops everything (quit) and waits for the helper to exit.
func (h *Helper) Close() error {
	done := make(chan struct{})
	go func() {
		_, _ = h.Request(map[string]interface{}{"op": "quit"})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
	}
	h.in.Close() // end of input: the helper stops what is left and exits
	errc := make(chan error, 1)
	go func() { errc <- h.cmd.Wait() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(20 * time.Second):
		_ = h.cmd.Process.Kill()
		return <-errc
	}
}

// Log is the end of the helper's standard error (its diagnostics).
func (h *Helper) Log() string { return h.errs.String() }

// tail keeps the last 64 KiB written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - 64<<10; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
