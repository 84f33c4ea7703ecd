// Command bootops provisions bare-metal edge nodes from Git.
//
// Operators commit sites, nodes and OS profiles (YAML or CUE); bootops checks
// and renders them offline, and serves them to machines that PXE-boot.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
)

// exit codes shared by every command.
const (
	exitOK      = 0
	exitInvalid = 1
	exitUsage   = 2
)

// usageError is a mistake in the command line (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// errSilent is returned after a command already printed why it failed.
var errSilent = errors.New("")

type command struct {
	name    string
	summary string
	usage   string // arguments after the name
	example string
	run     func(ctx context.Context, env *env, args []string) error
}

// env is what a command talks to: injected so tests run commands in-process.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

func commands() []*command {
	return []*command{
		validateCmd(), compileCmd(), renderCmd(), explainCmd(), diffCmd(), exportCmd(), serveCmd(), hubCmd(), statusCmd(), logsCmd(), inventoryCmd(), reportCmd(), powerCmd(), bootDeviceCmd(), recoveryKeyCmd(), eraseCertCmd(), enrollCmd(), importCmd(), microosCmd(), mediaCmd(), caCmd(), schemaCmd(), versionCmd(),
	}
}

func main() {
	// A command runs once and exits: let the heap grow twice as far between
	// collections, but collect harder past 200 MiB, so a 10,000-node
	// compile stays fast and well under 300 MB.
	debug.SetGCPercent(200)
	debug.SetMemoryLimit(200 << 20)
	// SIGINT and SIGTERM end the context: the daemon drains, then exits.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, &env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}, os.Args[1:]))
}

func run(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) > 1 {
			for _, c := range commands() {
				if c.name == args[1] {
					return run(ctx, e, []string{c.name, "--help"})
				}
			}
		}
		printUsage(e.stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = append([]string{"version"}, args[1:]...)
	}
	if args[0] == workerCommand {
		return compileWorker(e, os.Stdin, args[1:])
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(withEnv(ctx, e), e, args[1:])
		var ue usageError
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, flag.ErrHelp):
			return exitOK
		case errors.As(err, &ue):
			fmt.Fprintf(e.stderr, "bootops %s: %s\nRun 'bootops %s --help' for usage.\n", c.name, ue.msg, c.name)
			return exitUsage
		case errors.Is(err, errSilent):
			return exitInvalid
		case errors.Is(err, errChanges):
			return exitChanges
		default:
			fmt.Fprintf(e.stderr, "bootops %s: %v\n", c.name, err)
			return exitInvalid
		}
	}
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	fmt.Fprintf(e.stderr, "bootops: unknown command %q (commands: %s)\n", args[0], strings.Join(names, ", "))
	return exitUsage
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, "bootops provisions bare-metal edge nodes from Git.\n\nUsage:\n  bootops <command> [arguments]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'bootops <command> --help' for a command's flags and an example.\nFlags may also be set as BOOTOPS_<FLAG> environment variables (BOOTOPS_SITE=edge-1).\n")
}

// flags makes a command's flag set with a usage text that shows the example.
func (c *command) flags(e *env) *flag.FlagSet {
	fs := flag.NewFlagSet("bootops "+c.name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		w := e.stdout
		fmt.Fprintf(w, "%s\n\nUsage:\n  bootops %s %s\n", c.summary, c.name, c.usage)
		var any bool
		fs.VisitAll(func(*flag.Flag) { any = true })
		if any {
			fmt.Fprintf(w, "\nFlags:\n")
			fs.SetOutput(w)
			fs.PrintDefaults()
			fs.SetOutput(e.stderr)
		}
		fmt.Fprintf(w, "\nExample:\n%s\n", c.example)
	}
	return fs
}

// parse parses flags that may come before or after positional arguments,
// with BOOTOPS_<FLAG> environment variables as defaults.
func parse(fs *flag.FlagSet, e *env, args []string) ([]string, error) {
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "BOOTOPS_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := e.getenv(name); v != "" {
			if err := fs.Set(f.Name, v); err != nil && envErr == nil {
				envErr = usagef("%s=%q: %v", name, v, err)
			}
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		if args[0] == "--" {
			pos = append(pos, args[1:]...)
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	return pos, nil
}

// parseNone parses the flags of a command that takes no arguments.
func parseNone(fs *flag.FlagSet, e *env, args []string) error {
	pos, err := parse(fs, e, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected arguments: %s", strings.Join(pos, " "))
	}
	return nil
}

// parseDir parses the flags and the one optional repository directory
// argument (default ".").
func parseDir(fs *flag.FlagSet, e *env, args []string) (string, error) {
	pos, err := parse(fs, e, args)
	if err != nil {
		return "", err
	}
	switch len(pos) {
	case 0:
		return ".", nil
	case 1:
		return pos[0], nil
	}
	return "", usagef("want at most one directory, got %d arguments: %s", len(pos), strings.Join(pos, " "))
}
