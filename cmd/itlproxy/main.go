package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/caarlos0/env/v11"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	// After the first signal starts the graceful shutdown, a second one
	// kills the process the default way.
	context.AfterFunc(ctx, stop)
	err := run(ctx, os.Args[1:], env.ToMap(os.Environ()), os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "itlproxy:", err)
		var ue *usageError
		var ce *configError
		if errors.As(err, &ue) || errors.As(err, &ce) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
