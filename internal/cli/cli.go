// Package cli is the sluice command: each subcommand is a function over its
// arguments and streams, so tests run it in process.
package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error
}

// commands is filled by each subcommand's file.
var commands = map[string]command{}

// errUsage is returned by a subcommand whose arguments are wrong, after it has
// printed its usage.
var errUsage = fmt.Errorf("usage")

// Main runs the sluice command with args (without the program name) and returns
// the process's exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "sluice: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	if err := c.run(ctx, args[1:], stdin, stdout, stderr); err != nil {
		if err != errUsage {
			fmt.Fprintf(stderr, "sluice %s: %v\n", args[0], err)
		}
		return 2
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "sluice: a rate limiter.\n\nUsage: sluice COMMAND [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'sluice COMMAND -h' for a command's flags.")
}
