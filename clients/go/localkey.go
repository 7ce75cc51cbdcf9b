package lockbroker

// The local per-key lock. The broker counts a second ACQUIRE of a key by
// the same session as reentrant: it answers OK at once with the same
// token. Two goroutines sharing a Client (one session) would then both
// "hold" the key. So the client lets one Lock per key at a time reach the
// broker, from the moment it is asked until its hold ends (released or
// lost) or the request ends without one; the others queue here, in FIFO
// order, as Spring's lock registry does in front of Redis.

// localWaiter is a request queued behind a key's local lock; waiting()
// turns false once it gave up (its caller's context ended).
type localWaiter interface {
	waiting() bool
}

type localLocks struct {
	keys map[string][]localWaiter // present: taken; the queue behind it
}

// take takes key's local lock if it is free.
func (l *localLocks) take(key string) bool {
	if _, taken := l.keys[key]; taken {
		return false
	}
	if l.keys == nil {
		l.keys = make(map[string][]localWaiter)
	}
	l.keys[key] = nil
	return true
}

// wait queues w behind key's local lock (taken: take answered false).
func (l *localLocks) wait(key string, w localWaiter) {
	l.keys[key] = append(l.keys[key], w)
}

// release passes key's local lock to the first queued request still
// waiting, and returns it; nil when nobody waits (the key is free then).
func (l *localLocks) release(key string) localWaiter {
	q, taken := l.keys[key]
	if !taken {
		return nil
	}
	for i, w := range q {
		if w.waiting() {
			q[i] = nil
			l.keys[key] = q[i+1:]
			return w
		}
	}
	delete(l.keys, key)
	return nil
}

func (l *localLocks) taken(key string) bool {
	_, taken := l.keys[key]
	return taken
}

// each calls fn for every queued request (the client's Close ends them).
func (l *localLocks) each(fn func(localWaiter)) {
	for _, q := range l.keys {
		for _, w := range q {
			if w != nil && w.waiting() {
				fn(w)
			}
		}
	}
}
