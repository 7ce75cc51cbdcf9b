package integration

// The README's promise: installed the documented way (a module with a
// replace of lockbroker), the README's first code block runs as written
// against a broker on 127.0.0.1:7711. The broker is a real one on a free
// port; a relay on 127.0.0.1:7711 forwards to it (when 7711 is taken on
// this machine, the example runs with the broker's address put in its
// place instead).

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"lockbroker"
)

const defaultAddr = "127.0.0.1:7711"

func TestREADMEExample(t *testing.T) {
	e := setup(t, "broker b1")
	addr := e.broker("b1").Addr()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```(\\w*)\n(.*?)```").FindSubmatch(readme)
	if m == nil || string(m[1]) != "go" {
		t.Fatal("the README's first code block is not Go")
	}
	example := string(m[2])
	if !strings.Contains(example, defaultAddr) {
		t.Fatalf("the example does not use %s", defaultAddr)
	}
	if ln, err := net.Listen("tcp", defaultAddr); err == nil {
		defer ln.Close()
		go relay(ln, addr)
	} else {
		t.Logf("%s is taken here: the example runs against %s", defaultAddr, addr)
		example = strings.ReplaceAll(example, defaultAddr, addr)
	}

	dir := t.TempDir()
	lib, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, gobin, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// the README's install steps
	run("mod", "init", "example")
	run("mod", "edit", "-require", "lockbroker@v0.0.0", "-replace", "lockbroker="+lib)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(example), 0o644); err != nil {
		t.Fatal(err)
	}
	out := run("run", ".")
	if !regexp.MustCompile(`holding orders:42, fencing token \d{10,}`).MatchString(out) {
		t.Fatalf("the example printed %q", out)
	}
	c := e.client(lockbroker.Config{}, "b1")
	if st, err := c.Owner(ctx(t, 5*time.Second), "orders:42"); err != nil || st.Kind != lockbroker.Free {
		t.Fatalf("after the example: %v %v", st, err)
	}
}

// relay forwards each connection of ln to target.
func relay(ln net.Listener, target string) {
	for {
		a, err := ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", target)
		if err != nil {
			a.Close()
			continue
		}
		go func() { io.Copy(b, a); b.Close() }()
		go func() { io.Copy(a, b); a.Close() }()
	}
}
