// Command sluice runs the sluice rate limiter from the command line: `sim`
// draws what each algorithm does to a bursty trace, `replay` runs a trace of
// requests through one limit and prints every decision. Run `sluice help`.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/sluice-go/sluice/cmd/sluice/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
