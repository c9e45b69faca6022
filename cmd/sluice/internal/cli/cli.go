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
	"strings"
	"time"
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
// error and where the usage is (the usage itself, serve's 150 lines, would
// push the error off the screen) to stderr and returns errUsage.
func parseFlags(fs *flag.FlagSet, usage func(io.Writer), args []string, stdout, stderr io.Writer) error {
	fs.SetOutput(io.Discard) // the errors are printed below, once
	fs.Usage = func() {}
	restore := explainDurations(fs)
	err := fs.Parse(args)
	restore()
	fs.SetOutput(stderr)
	fs.Usage = func() { usage(stderr) }
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		usage(stdout)
		return errHelp
	case err != nil:
		usageError(stderr, fs.Name(), err.Error())
		return errUsage
	case fs.NArg() > 0:
		usageError(stderr, fs.Name(), fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
		return errUsage
	}
	return nil
}

// usageError prints a usage error of the command name ("" for sluice
// itself) and the one line that says where its usage is.
func usageError(stderr io.Writer, name, msg string) {
	cmd := strings.TrimSpace("sluice " + name)
	fmt.Fprintf(stderr, "%s: %s\nsee %s --help\n", cmd, msg, cmd)
}

// durationHint is what a duration flag's parse error says is wanted.
const durationHint = "want a duration with its unit: 1s, 250ms, 2m30s, 1h"

// hintedDuration is a duration flag whose parse error says what is
// wanted: the flag package's own says "parse error".
type hintedDuration struct{ flag.Value }

func (d hintedDuration) Set(s string) error {
	if err := d.Value.Set(s); err != nil {
		return errors.New(durationHint)
	}
	return nil
}

// explainDurations has fs's duration flags explain their parse errors
// until restore, which puts the flag package's values back (its help
// names their type from them).
func explainDurations(fs *flag.FlagSet) (restore func()) {
	var undo []func()
	fs.VisitAll(func(f *flag.Flag) {
		if g, ok := f.Value.(flag.Getter); ok {
			if _, ok := g.Get().(time.Duration); ok {
				v := f.Value
				f.Value = hintedDuration{v}
				undo = append(undo, func() { f.Value = v })
			}
		}
	})
	return func() {
		for _, u := range undo {
			u()
		}
	}
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
		usageError(stderr, "", fmt.Sprintf("unknown command %q", args[0]))
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
