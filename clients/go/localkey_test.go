package lockbroker

import "testing"

type fakeWaiter struct {
	name string
	gone bool
}

func (w *fakeWaiter) waiting() bool { return !w.gone }

func TestLocalLocksFIFO(t *testing.T) {
	var l localLocks
	if !l.take("k") {
		t.Fatal("a free key was not taken")
	}
	if l.take("k") {
		t.Fatal("a taken key was taken again")
	}
	if !l.take("other") {
		t.Fatal("keys are independent")
	}
	a, b, c := &fakeWaiter{name: "a"}, &fakeWaiter{name: "b"}, &fakeWaiter{name: "c"}
	l.wait("k", a)
	l.wait("k", b)
	l.wait("k", c)
	b.gone = true // gave up while queued
	if w := l.release("k"); w != a {
		t.Fatalf("first out %v, want a", w)
	}
	if !l.taken("k") {
		t.Fatal("the key passed to a is free")
	}
	if w := l.release("k"); w != c {
		t.Fatalf("second out %v, want c (b gave up)", w)
	}
	if w := l.release("k"); w != nil || l.taken("k") {
		t.Fatalf("nobody waits: %v, taken %v", w, l.taken("k"))
	}
	if l.release("k") != nil {
		t.Fatal("release of a free key")
	}
	if !l.take("k") {
		t.Fatal("a freed key cannot be taken")
	}
	var seen []string
	l.wait("k", &fakeWaiter{name: "d"})
	l.wait("k", &fakeWaiter{name: "e", gone: true})
	l.each(func(w localWaiter) { seen = append(seen, w.(*fakeWaiter).name) })
	if len(seen) != 1 || seen[0] != "d" {
		t.Fatalf("each: %v", seen)
	}
}
