package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// StrictSubcommands makes every command of root's tree that only groups
// subcommands (cobra's default completion command too) fail on an unknown
// subcommand with one line, `unknown command "frob" for "chunkctl chunk"`,
// where cobra would print the group's help and exit 0. Without arguments
// such a command still prints its help; `help chunk frob` fails the same
// way. Call it once the tree is complete.
func StrictSubcommands(root *cobra.Command) {
	// The completion and help commands are otherwise added only while
	// executing; made now, they are in the tree changed below. A root
	// without other subcommands keeps completion hidden, as cobra does by
	// adding it only when it is called.
	if !root.HasSubCommands() {
		root.CompletionOptions.HiddenDefaultCmd = true
	}
	root.InitDefaultCompletionCmd("completion")
	root.InitDefaultHelpCmd()
	for _, c := range root.Commands() {
		if c.Name() == "help" {
			c.Run, c.RunE = nil, strictHelp
		}
	}
	strict(root)
}

// strictHelp is the help command's run: help of a command, refusing an
// unknown one.
func strictHelp(c *cobra.Command, args []string) error {
	cmd, rest, err := c.Root().Find(args)
	switch {
	case err != nil:
		return err
	case len(rest) > 0 && cmd.HasSubCommands():
		return unknownSubcommand(cmd, rest[0])
	case len(rest) > 0:
		return fmt.Errorf("unknown help topic %q: %q has no subcommands", strings.Join(args, " "), cmd.CommandPath())
	}
	return cmd.Help()
}

func strict(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		strict(sub)
	}
	if !cmd.HasSubCommands() || cmd.Runnable() {
		return
	}
	cmd.Args = cobra.ArbitraryArgs
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's own default for the root
	}
	cmd.DisableFlagsInUseLine = true
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return unknownSubcommand(cmd, args[0])
	}
}

// unknownSubcommand is the one-line error for `parent name`: it suggests the
// subcommands name is close to, or else lists them all.
func unknownSubcommand(parent *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, parent.CommandPath())
	if want := parent.SuggestionsFor(name); len(want) > 0 {
		return fmt.Errorf("%s; did you mean %s?", msg, strings.Join(want, " or "))
	}
	var all []string
	for _, c := range parent.Commands() {
		if c.IsAvailableCommand() {
			all = append(all, c.Name())
		}
	}
	return fmt.Errorf("%s; want one of %s", msg, strings.Join(all, ", "))
}
