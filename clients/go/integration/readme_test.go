package integration

// The README's promises: installed the documented way (the module's
// requirement, with the README's replace standing in for the download:
// the tests are offline), the README's first code block runs as written
// against a broker on 127.0.0.1:7711; the install section names this
// module and its release tags; the paragraph before the example says when
// a crashed program's locks come back. The broker is a real one on a free
// port; a relay on 127.0.0.1:7711 forwards to it (when 7711 is taken on
// this machine, the example runs with the broker's address put in its
// place instead).

import (
	"context"
	"fmt"
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

	lockbroker "github.com/lockbroker/lockbroker/clients/go"
)

const defaultAddr = "127.0.0.1:7711"

func TestREADMEExample(t *testing.T) {
	e := setup(t, "broker b1")
	addr := e.broker("b1").Addr()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	mod := modulePath(t)
	install := string(readme[strings.Index(string(readme), "## Install"):])
	for _, want := range []string{"```sh\ngo get " + mod + "@v", "```text\nrequire " + mod + " v",
		"tagged `clients/go/vX.Y.Z`"} {
		if !strings.Contains(install, want) {
			t.Errorf("the install section lacks %q", want)
		}
	}
	before := string(readme[:strings.Index(string(readme), "```")])
	if !strings.Contains(before, fmt.Sprintf("**%d seconds**", int(lockbroker.DefaultGrace.Seconds()))) ||
		!strings.Contains(before, "Grace: time.Minute") || !strings.Contains(before, "defer c.Close()") {
		t.Errorf("the paragraph before the example does not say the grace, how to raise it, and Close: %s", before)
	}
	found := lockbroker.DefaultPingInterval + lockbroker.DefaultPingTimeout
	if !strings.Contains(strings.Join(strings.Fields(before), " "),
		fmt.Sprintf("within %d seconds when its host vanished", int(found.Seconds()))) {
		t.Errorf("the paragraph before the example does not say when a vanished broker is found (%v): %s", found, before)
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
	// the README's install, offline: the requirement, and the replace
	run("mod", "init", "example")
	run("mod", "edit", "-require", mod+"@v0.0.0", "-replace", mod+"="+lib)
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

// modulePath is the module's path, as go.mod says.
func modulePath(t *testing.T) string {
	b, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^module (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod names no module")
	}
	return string(m[1])
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
