package stepd_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/stepd-dev/stepd/clients/go/stepd"
)

// The README's example: dial, ping, add a breakpoint, watch events and
// answer pauses on the same stream.
func Example() {
	ctx := context.Background()
	run := func() error {
		c, err := stepd.Dial(ctx, "") // $STEPD_ADDR, else 127.0.0.1:7701; or "unix:/path/stepd.sock"
		if err != nil {
			return err
		}
		defer c.Close()
		ping, err := c.Ping(ctx) // version, protocol_version "stepd.v1", instance_id
		if err != nil {
			return err
		}
		fmt.Println("stepd", ping.Version)
		_, err = c.AddBreakpoint(ctx, stepd.SourceBreakpoint("/src/app/main.py", 12, stepd.Condition("n > 3")))
		if err != nil {
			return err
		}
		sub, err := c.Subscribe(ctx, stepd.WatchOptions{}) // a snapshot first, then events
		if err != nil {
			return err
		}
		defer sub.Close()
		for ev := range sub.Events() {
			if p := ev.GetStopped().GetPause(); p != nil {
				sub.SendDebugInput(p.Key, stepd.CmdContinue()) // answer on the same stream
			}
		}
		return sub.Err()
	}
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func ExampleError() {
	ctx := context.Background()
	c, err := stepd.Dial(ctx, "")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	_, err = c.SendDebugInput(ctx, "some-key", stepd.CmdContinue())
	switch {
	case errors.Is(err, stepd.ErrAlreadyAnswered): // someone else answered first
	case errors.Is(err, stepd.ErrPauseNotFound):
	default:
		var e *stepd.Error
		if errors.As(err, &e) {
			log.Println(e.Code, e.ReasonName, e.Metadata, e.FieldViolations)
		}
	}
}
