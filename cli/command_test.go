package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// groups returns the command paths (without the root's name) of every
// command in root's tree that groups subcommands, root included.
func groups(root *cobra.Command) [][]string {
	var out [][]string
	var walk func(cmd *cobra.Command, path []string)
	walk = func(cmd *cobra.Command, path []string) {
		if !cmd.HasSubCommands() {
			return
		}
		out = append(out, path)
		for _, sub := range cmd.Commands() {
			walk(sub, append(append([]string(nil), path...), sub.Name()))
		}
	}
	walk(root, nil)
	return out
}

// TestUnknownSubcommandFails: every group command of chunkctl, the
// completion command included, refuses an unknown subcommand with one line
// (cobra prints the group's help and exits 0), and still prints its help
// when given none.
func TestUnknownSubcommandFails(t *testing.T) {
	all := groups(NewRootCommand())
	if len(all) < 10 {
		t.Fatalf("only %d group commands found: %v", len(all), all)
	}
	sawCompletion := false
	for _, path := range all {
		sawCompletion = sawCompletion || strings.Join(path, " ") == "completion"
		want := `unknown command "frob" for "` + strings.Join(append([]string{"chunkctl"}, path...), " ") + `"`
		out, err := run(t, []string{"127.0.0.1:1"}, nil, append(path, "frob")...)
		if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") || out != "" {
			t.Errorf("chunkctl %s frob: err %v, stdout %q; want one line starting %s", strings.Join(path, " "), err, out, want)
		}
		if out, err := run(t, []string{"127.0.0.1:1"}, nil, path...); err != nil || !strings.Contains(out, "Available Commands:") {
			t.Errorf("chunkctl %s: err %v, want its help:\n%s", strings.Join(path, " "), err, out)
		}
	}
	if !sawCompletion {
		t.Errorf("the completion command is not among the group commands %v", all)
	}
	_, err := run(t, []string{"127.0.0.1:1"}, nil, "chunk", "wrte")
	if err == nil || err.Error() != `unknown command "wrte" for "chunkctl chunk"; did you mean write?` {
		t.Errorf("chunk wrte: %v", err)
	}
	_, err = run(t, []string{"127.0.0.1:1"}, nil, "epoch", "zzz")
	if err == nil || err.Error() != `unknown command "zzz" for "chunkctl epoch"; want one of update` {
		t.Errorf("epoch zzz: %v", err)
	}
	// help of an unknown topic is refused the same way.
	if _, err := run(t, []string{"127.0.0.1:1"}, nil, "help", "chunk", "frob"); err == nil ||
		err.Error() != `unknown command "frob" for "chunkctl chunk"; want one of clone, delete, delete-snapshot, hash, info, read, recover, snapshot-read, write` {
		t.Errorf("help chunk frob: %v", err)
	}
	if out, err := run(t, []string{"127.0.0.1:1"}, nil, "help", "chunk", "write"); err != nil || !strings.Contains(out, "--size") {
		t.Errorf("help chunk write: %v\n%s", err, out)
	}
	// A leaf command's stray argument is refused as before.
	root := NewRootCommand()
	root.SetOut(&bytes.Buffer{})
	root.SetArgs([]string{"chunk", "info", "--pool", "1", "--copyset", "1", "--chunk", "1", "extra"})
	if err := root.Execute(); err == nil {
		t.Error("chunk info with a stray argument succeeded")
	}
}
