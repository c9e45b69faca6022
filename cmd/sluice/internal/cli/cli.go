// Package cli is the sluice command: each subcommand is a function over its
// arguments and streams, so tests run it in process.
package cli

import (
	"context"
	"errors"
	"flag"
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
var errUsage = errors.New("usage")

// errHelp is returned by a subcommand asked for its usage (-h, --help), after
// it has printed it to stdout: the command exits 0.
var errHelp = errors.New("help")

// parseFlags parses args into fs, whose usage is printed by usage. Asked for
// help (-h, -help, --help), it prints the usage to stdout and returns
// errHelp; for a bad flag or an argument that is not a flag it prints the
// error and the usage to stderr and returns errUsage.
func parseFlags(fs *flag.FlagSet, usage func(io.Writer), args []string, stdout, stderr io.Writer) error {
	fs.SetOutput(io.Discard) // the errors are printed below, once
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	fs.Usage = func() { usage(stderr) }
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		usage(stdout)
		return errHelp
	case err != nil:
		fmt.Fprintf(stderr, "sluice %s: %v\n\n", fs.Name(), err)
		usage(stderr)
		return errUsage
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "sluice %s: unexpected argument %q\n\n", fs.Name(), fs.Arg(0))
		usage(stderr)
		return errUsage
	}
	return nil
}

// flagGiven reports whether the flag name was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// Main runs the sluice command with args (without the program name) and returns
// the process's exit code: 0, or 2 for an error. Help asked for (sluice
// help, -h, --help, and the same after a command) goes to stdout and exits 0.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		usage(stdout)
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = append([]string{"version"}, args[1:]...)
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "sluice: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	if err := c.run(ctx, args[1:], stdin, stdout, stderr); err != nil {
		if err == errHelp {
			return 0
		}
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
