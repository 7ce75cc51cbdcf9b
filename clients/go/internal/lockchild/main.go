// Command lockchild is a program the integration tests build and run as a
// child process (integration/lifecycle_test.go): it connects to the broker
// at its first argument with the library's defaults, takes the key of its
// second, prints "held <token>", then ends as its third says: "close"
// (Close, as the README's defer c.Close(), then returns), "noclose"
// (returns from main without Close: the process ends, the broker sees the
// connection drop), "wait" (until it is killed).
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	lockbroker "github.com/lockbroker/lockbroker/clients/go"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: lockchild <broker> <key> close|noclose|wait")
		os.Exit(2)
	}
	ctx := context.Background()
	c, err := lockbroker.Dial(ctx, os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	h, err := c.Lock(ctx, os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("held", h.Token())
	switch os.Args[3] {
	case "close":
		c.Close()
	case "wait":
		time.Sleep(time.Hour)
	}
}
