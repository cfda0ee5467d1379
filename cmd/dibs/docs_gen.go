//go:build gendocs

package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cpuguy83/go-md2man/v2/md2man"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dibs-gpu/dibs/cmd/internal/daemoncmd"
)

// extraCmds adds the hidden gen-docs command to builds tagged gendocs. The
// release runs it (.goreleaser.yaml, before.hooks); the binary people install
// has no such command and does not carry md2man's markdown renderer.
func (c *cli) extraCmds() []*cobra.Command {
	var ver, date string
	cmd := &cobra.Command{
		Use:    "gen-docs DIR",
		Short:  "Write man pages and shell completions for packaging",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			when := time.Now().UTC()
			if date != "" {
				t, err := time.Parse(time.RFC3339, date)
				if err != nil {
					return fmt.Errorf("--date %q: want RFC 3339, e.g. 2026-03-10T16:00:00Z", date)
				}
				when = t
			}
			if ver == "" {
				ver = buildInfo().Version
			}
			return genDocs(cmd.Root(), daemoncmd.Root(c.stdout, c.stderr), args[0], ver, when)
		},
	}
	cmd.Flags().StringVar(&ver, "version", "", "release the pages name (default: this binary's)")
	cmd.Flags().StringVar(&date, "date", "", "date printed on the pages, RFC 3339 (default: now); the release passes the commit date so builds repeat")
	return []*cobra.Command{cmd}
}

// genDocs writes DIR/man/dibs*.1.gz, one page per command of the client
// (root) and of the daemon's binary (daemon: dibsd*.1.gz), and
// DIR/completions/{dibs.bash,_dibs,dibs.fish}, replacing what those two
// folders held. Output depends only on the command trees, ver and when, so
// two releases of one commit are identical.
func genDocs(root, daemon *cobra.Command, dir, ver string, when time.Time) error {
	manDir, compDir := filepath.Join(dir, "man"), filepath.Join(dir, "completions")
	for _, d := range []string{manDir, compDir} {
		// Start empty, so a command removed since the last run leaves no page.
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("gen-docs: %w", err)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("gen-docs: %w", err)
		}
	}
	// dibsd's own pages (man dibsd, dibsd-agent, …) beside the client's:
	// the unit runs dibsd agent.
	for _, r := range []*cobra.Command{root, daemon} {
		if err := genMan(r, manDir, ver, when); err != nil {
			return err
		}
	}
	comps := []struct {
		file string
		gen  func(*bytes.Buffer) error
	}{
		{"dibs.bash", func(b *bytes.Buffer) error { return root.GenBashCompletionV2(b, true) }},
		{"_dibs", func(b *bytes.Buffer) error { return root.GenZshCompletion(b) }},
		{"dibs.fish", func(b *bytes.Buffer) error { return root.GenFishCompletion(b, true) }},
	}
	for _, cp := range comps {
		var b bytes.Buffer
		if err := cp.gen(&b); err != nil {
			return fmt.Errorf("gen-docs: %s: %w", cp.file, err)
		}
		if err := os.WriteFile(filepath.Join(compDir, cp.file), b.Bytes(), 0o644); err != nil {
			return fmt.Errorf("gen-docs: %w", err)
		}
	}
	return nil
}

// genMan writes manDir/NAME.1.gz for root and each visible command below it,
// named by the command path (dibs-claim.1.gz, dibsd-agent.1.gz).
func genMan(root *cobra.Command, manDir, ver string, when time.Time) error {
	var walk func(*cobra.Command) error
	walk = func(cmd *cobra.Command) error {
		if !cmd.IsAvailableCommand() || cmd.IsAdditionalHelpTopicCommand() {
			return nil
		}
		// Parent first, as cobra's GenManTree does: a child's page lists
		// the flags it inherits, which are merged in once the parent is done.
		page := md2man.Render(manPage(cmd, ver, when))
		name := strings.ReplaceAll(cmd.CommandPath(), " ", "-") + ".1.gz"
		if err := writeGzip(filepath.Join(manDir, name), page); err != nil {
			return err
		}
		for _, sub := range cmd.Commands() {
			if err := walk(sub); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(root)
}

// manPage is cmd's man page in md2man's markdown. It is cobra/doc's layout
// with what a reader needs instead of what cobra prints: no DESCRIPTION
// that only repeats the NAME line (a command with no Long has none), and
// each option with a placeholder for its value and its default only when
// it has one ("--for DURATION", not `--for=""`; "--force", not
// "--force[=false]").
func manPage(cmd *cobra.Command, ver string, when time.Time) []byte {
	dashed := strings.ReplaceAll(cmd.CommandPath(), " ", "-")
	var b bytes.Buffer
	fmt.Fprintf(&b, "%% \"%s\" \"1\" \"%s\" \"dibs %s\" \"dibs manual\"\n", strings.ToUpper(dashed), when.Format("Jan 2006"), ver)
	fmt.Fprintf(&b, "# NAME\n%s \\- %s\n\n", dashed, cmd.Short)
	fmt.Fprintf(&b, "# SYNOPSIS\n**%s**\n\n", cmd.UseLine())
	if long := strings.TrimSpace(cmd.Long); long != "" {
		fmt.Fprintf(&b, "# DESCRIPTION\n%s\n\n", manText(long))
	}
	for _, sec := range []struct {
		title string
		flags *pflag.FlagSet
	}{{"OPTIONS", cmd.NonInheritedFlags()}, {"OPTIONS INHERITED FROM PARENT COMMANDS", cmd.InheritedFlags()}} {
		if !sec.flags.HasAvailableFlags() {
			continue
		}
		fmt.Fprintf(&b, "# %s\n", sec.title)
		sec.flags.VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Deprecated != "" {
				return
			}
			fmt.Fprintf(&b, "%s\n\t%s\n\n", manFlag(f), manFlagUsage(f))
		})
	}
	if cmd.Example != "" {
		fmt.Fprintf(&b, "# EXAMPLE\n```\n%s\n```\n", cmd.Example)
	}
	var also []string
	if cmd.HasParent() {
		also = append(also, fmt.Sprintf("**%s(1)**", strings.ReplaceAll(cmd.Parent().CommandPath(), " ", "-")))
	}
	subs := slices.Clone(cmd.Commands())
	slices.SortFunc(subs, func(a, b *cobra.Command) int { return strings.Compare(a.Name(), b.Name()) })
	for _, sub := range subs {
		if sub.IsAvailableCommand() && !sub.IsAdditionalHelpTopicCommand() {
			also = append(also, fmt.Sprintf("**%s-%s(1)**", dashed, sub.Name()))
		}
	}
	if len(also) > 0 {
		fmt.Fprintf(&b, "# SEE ALSO\n%s\n", strings.Join(also, ", "))
	}
	return b.Bytes()
}

// manText keeps a Long's layout in the page: its indented lines (commands,
// examples) as literal blocks of their own, the rest as paragraphs.
func manText(long string) string {
	var out []string
	in := false
	for _, l := range strings.Split(long, "\n") {
		lit := strings.HasPrefix(l, "  ")
		if lit != in {
			if lit {
				out = append(out, "", "```")
			} else {
				out = append(out, "```", "")
			}
			in = lit
		}
		out = append(out, l)
	}
	if in {
		out = append(out, "```")
	}
	return strings.Join(out, "\n")
}

// manFlag is an option's heading: "**-g**, **--gpus** *N*".
func manFlag(f *pflag.Flag) string {
	s := fmt.Sprintf("**--%s**", f.Name)
	if f.Shorthand != "" && f.ShorthandDeprecated == "" {
		s = fmt.Sprintf("**-%s**, %s", f.Shorthand, s)
	}
	if f.Value.Type() == "bool" {
		return s
	}
	name, _ := pflag.UnquoteUsage(f)
	switch {
	case name == "" || name == "string" || name == "strings" || name == "stringArray":
		name = "VALUE"
		if f.Value.Type() == "duration" {
			name = "DURATION"
		}
	case name == "int" || name == "uint" || name == "float":
		name = "N"
	case name == "duration":
		name = "DURATION"
	default:
		name = strings.ToUpper(name)
	}
	if f.NoOptDefVal != "" {
		return fmt.Sprintf("%s[=*%s*]", s, name)
	}
	return fmt.Sprintf("%s *%s*", s, name)
}

// manFlagUsage is an option's text, with its default when it has one that
// its text does not already give.
func manFlagUsage(f *pflag.Flag) string {
	_, usage := pflag.UnquoteUsage(f)
	switch f.DefValue {
	case "", "0", "false", "[]", "0s", "<nil>":
		return usage
	}
	if strings.Contains(usage, "default") {
		return usage
	}
	if f.Value.Type() == "bool" && f.DefValue == "true" {
		return usage + " (on by default)"
	}
	return fmt.Sprintf("%s (default %s)", usage, f.DefValue)
}

// writeGzip compresses with no name and no time in the header (Debian's rule
// for man pages, and what keeps the package reproducible).
func writeGzip(path string, data []byte) error {
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return err
	}
	if _, err := zw.Write(data); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("gen-docs: %w", err)
	}
	return nil
}
