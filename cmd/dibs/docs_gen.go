//go:build gendocs

package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/dibs-gpu/dibs/internal/daemoncmd"
)

// extraCmds adds the hidden gen-docs command to builds tagged gendocs. The
// release runs it (.goreleaser.yaml, before.hooks); the binary people install
// has no such command and does not carry cobra/doc's markdown renderer.
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
	header := &doc.GenManHeader{Title: "DIBS", Section: "1", Source: "dibs " + ver, Manual: "dibs manual", Date: &when}
	var walk func(*cobra.Command) error
	walk = func(cmd *cobra.Command) error {
		if !cmd.IsAvailableCommand() || cmd.IsAdditionalHelpTopicCommand() {
			return nil
		}
		// Parent first, as cobra's GenManTree does: a child's page lists
		// the flags it inherits, which are merged in once the parent is done.
		var page bytes.Buffer
		h := *header
		h.Title = strings.ToUpper(strings.ReplaceAll(cmd.CommandPath(), " ", "-"))
		cmd.DisableAutoGenTag = true
		if err := doc.GenMan(cmd, &h, &page); err != nil {
			return fmt.Errorf("gen-docs: man page of %q: %w", cmd.CommandPath(), err)
		}
		name := strings.ReplaceAll(cmd.CommandPath(), " ", "-") + ".1.gz"
		if err := writeGzip(filepath.Join(manDir, name), page.Bytes()); err != nil {
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
