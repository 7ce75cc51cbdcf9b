package lockbroker

// notifier runs the hook's calls one after another, in the order posted,
// on a goroutine of its own: the client posts with its lock held and never
// waits for a hook.

import "sync"

type notifier struct {
	mu     sync.Mutex
	cond   *sync.Cond
	queue  []func()
	closed bool
}

func newNotifier() *notifier {
	n := &notifier{}
	n.cond = sync.NewCond(&n.mu)
	go n.run()
	return n
}

func (n *notifier) post(fn func()) {
	n.mu.Lock()
	if !n.closed {
		n.queue = append(n.queue, fn)
		n.cond.Signal()
	}
	n.mu.Unlock()
}

// close lets the calls posted so far run, then ends the goroutine.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	n.cond.Signal()
	n.mu.Unlock()
}

func (n *notifier) run() {
	n.mu.Lock()
	for {
		for len(n.queue) == 0 && !n.closed {
			n.cond.Wait()
		}
		if len(n.queue) == 0 {
			n.mu.Unlock()
			return
		}
		fn := n.queue[0]
		n.queue[0] = nil
		n.queue = n.queue[1:]
		n.mu.Unlock()
		fn()
		n.mu.Lock()
	}
}
