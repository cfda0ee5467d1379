package tui

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/textinput"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
)

type formKind int

const (
	formClaim formKind = iota
	formRun
	formExtend
	formFilter
)

// field is one labelled input of a form.
type field struct {
	name  string // count, duration, note, command, filter
	label string
	hint  string
	max   int // widest the input is drawn
	in    textinput.Model
}

// form is the panel that asks for a claim, a run, an extension or a filter.
// It is a sub-model: the root routes keys to it while it is open.
type form struct {
	kind   formKind
	title  string
	intro  []string // lines under the title: what the form will do
	node   string
	gpus   []int  // selected GPUs; empty means "count" decides
	mig    string // a MIG instance by GPU:INDEX ("0:2"): the claim is that instance
	lease  string // extend: the lease id
	fields []field
	focus  int
	keys   formKeyMap
}

const labelWidth = 10 // "duration  "

func newInput(st textinput.Styles, value string) textinput.Model {
	in := textinput.New()
	in.Prompt = ""
	in.SetVirtualCursor(false) // the terminal's own cursor: no escape codes in the text, fine with NO_COLOR
	in.SetStyles(st)
	in.CharLimit = 256
	in.SetValue(value)
	return in
}

func (f *form) add(st textinput.Styles, name, label, value, hint string, max int) {
	f.fields = append(f.fields, field{name: name, label: label, hint: hint, max: max, in: newInput(st, value)})
}

// newClaimForm asks for a claim (run=false) or a claim with a session (run=true).
// With GPUs selected it claims exactly those; picked, the free GPU under the
// cursor; otherwise a count on node.
func newClaimForm(st textinput.Styles, run bool, node string, gpus []int, picked bool) *form {
	f := &form{kind: formClaim, node: node, gpus: gpus, keys: defaultFormKeyMap()}
	verb := "claim"
	if run {
		f.kind, verb = formRun, "run"
	}
	switch {
	case picked:
		f.title = fmt.Sprintf("%s on %s: %s", verb, node, gpuList(gpus))
		f.intro = []string{"the GPU under the cursor — esc, then space picks more"}
	case len(gpus) > 0:
		f.title = fmt.Sprintf("%s on GPUs %s of %s", verb, joinInts(gpus), node)
		f.intro = []string{"exactly the GPUs you selected"}
	default:
		f.title = fmt.Sprintf("%s on %s", verb, node)
		f.intro = []string{"on " + node + ", the node under the cursor — esc, then space picks GPUs"}
		f.add(st, "count", "GPUs", "1", "how many", 4)
	}
	if run {
		f.intro = append(f.intro, "and starts a tmux session there with CUDA_VISIBLE_DEVICES set")
		f.add(st, "command", "command", "", "empty: a login shell", 60)
	}
	f.add(st, "note", "note", "", "what it is for", 40)
	f.add(st, "duration", "duration", "", "30m, 4h, 2d; empty: default", 8)
	f.keys.multi = len(f.fields) > 1
	f.focusFirstWords()
	return f
}

// focusFirstWords opens a claim form on what a person types first: the
// count when the form asks for one, else a run's command, else the note
// (the duration has a default, and comes last). It opened on the
// duration, so a note typed at once landed there.
func (f *form) focusFirstWords() {
	for _, name := range []string{"count", "command", "note"} {
		if i := slices.IndexFunc(f.fields, func(x field) bool { return x.name == name }); i >= 0 {
			f.setFocus(i)
			return
		}
	}
	f.setFocus(0)
}

// newMIGClaimForm is the claim (or run) form for the free MIG instance
// under the cursor: that instance (--mig GPU:INDEX), named with its profile
// ("0:2 1g.10gb").
func newMIGClaimForm(st textinput.Styles, run bool, node, instance string) *form {
	f := newClaimForm(st, run, node, nil, true)
	f.fields = slices.DeleteFunc(f.fields, func(x field) bool { return x.name == "count" })
	f.mig = strings.Fields(instance)[0]
	verb := "claim"
	if run {
		verb = "run"
	}
	f.title = fmt.Sprintf("%s on %s: MIG %s", verb, node, instance)
	f.intro[0] = "the MIG instance under the cursor (--mig " + f.mig + ")"
	f.keys.multi = len(f.fields) > 1
	f.focusFirstWords()
	return f
}

// newExtendForm asks how much longer a lease should run; ends says when it
// ends now, in the board's words.
func newExtendForm(st textinput.Styles, l *lease.Lease, what, ends string) *form {
	f := &form{kind: formExtend, lease: l.ID, node: l.Node, keys: defaultFormKeyMap()}
	f.title = "extend " + l.ID
	f.intro = []string{fmt.Sprintf("%s on %s, held by %s; %s", what, l.Node, holderName(l), ends)}
	f.add(st, "duration", "longer by", "1h", "30m, 2h, 1d", 8)
	f.setFocus(0)
	return f
}

func newFilterForm(st textinput.Styles, current string) *form {
	f := &form{kind: formFilter, keys: defaultFormKeyMap()}
	f.title = "filter"
	f.intro = []string{"nodes, users or GPU models containing the text"}
	f.add(st, "filter", "filter", current, "enter keeps it, esc clears it", 30)
	f.fields[0].in.CursorEnd()
	f.setFocus(0)
	return f
}

func (f *form) setFocus(i int) {
	if len(f.fields) == 0 {
		return
	}
	f.focus = (i + len(f.fields)) % len(f.fields)
	for j := range f.fields {
		if j == f.focus {
			f.fields[j].in.Focus()
		} else {
			f.fields[j].in.Blur()
		}
	}
}

func (f *form) value(name string) string {
	for _, fl := range f.fields {
		if fl.name == name {
			return strings.TrimSpace(fl.in.Value())
		}
	}
	return ""
}

// update handles a key while the form is open. It reports whether the key
// submitted or cancelled the form; other keys go to the focused input.
func (f *form) update(msg tea.KeyPressMsg) (submit, cancel bool) {
	switch {
	case key.Matches(msg, f.keys.Submit):
		return true, false
	case key.Matches(msg, f.keys.Cancel):
		return false, true
	case key.Matches(msg, f.keys.Next) && f.keys.multi:
		f.setFocus(f.focus + 1)
	case key.Matches(msg, f.keys.Prev) && f.keys.multi:
		f.setFocus(f.focus - 1)
	default:
		if len(f.fields) > 0 {
			f.fields[f.focus].in, _ = f.fields[f.focus].in.Update(msg)
		}
	}
	return false, false
}

// paste hands pasted text to the focused input.
func (f *form) paste(msg tea.PasteMsg) {
	if len(f.fields) > 0 {
		f.fields[f.focus].in, _ = f.fields[f.focus].in.Update(msg)
	}
}

// claimRequest builds the request the form describes, or says in plain
// words what to fix.
func (f *form) claimRequest() (api.ClaimRequest, error) {
	req := api.ClaimRequest{Node: f.node, Note: f.value("note")}
	if f.mig != "" {
		req.MIG = f.mig
	} else if len(f.gpus) > 0 {
		req.GPUs = append([]int(nil), f.gpus...)
	} else {
		n, err := strconv.Atoi(f.value("count"))
		if err != nil || n < 1 {
			return req, fmt.Errorf("GPUs must be a whole number of at least 1, not %q", f.value("count"))
		}
		req.Count = n
	}
	if d := f.value("duration"); d != "" {
		if _, err := words.ParseDuration(d); err != nil {
			return req, err
		}
		req.Duration = d
	}
	if f.kind == formRun {
		req.Run = &api.RunSpec{}
		if c := f.value("command"); c != "" {
			// One element: the agent runs it as a shell command line, so
			// pipes and quotes work as typed.
			req.Run.Command = []string{c}
		}
	}
	return req, nil
}

func (f *form) extendRequest() (api.ExtendRequest, error) {
	d := f.value("duration")
	if d == "" {
		return api.ExtendRequest{}, fmt.Errorf("say how much longer, like 30m or 2h")
	}
	if _, err := words.ParseDuration(d); err != nil {
		return api.ExtendRequest{}, err
	}
	return api.ExtendRequest{ID: f.lease, Duration: d}, nil
}

// view renders the form as lines of at most width cells, and where the
// focused input's cursor is (line, column) so the root can place the
// terminal cursor there. Inputs sit between brackets so they show without
// colour.
func (f *form) view(st *styles, width int) (lines []string, curLine, curCol int) {
	lines = append(lines, st.bold.render(truncate(f.title, width)))
	for _, l := range f.intro {
		lines = append(lines, st.dim.render(truncate(l, width)))
	}
	const lead = 2 + labelWidth + 1 // "› " label "["
	for i := range f.fields {
		fl := &f.fields[i]
		hint := " " + fl.hint
		room := width - lead - 1 // "]"
		inW := min(fl.max, room-ansi.StringWidth(hint))
		if inW < min(fl.max, 12) { // no room for the hint: the input first
			inW, hint = min(fl.max, room), ""
		}
		inW = max(inW, 1)
		fl.in.SetWidth(inW)
		mark := "  "
		if i == f.focus {
			mark = "› "
			curLine = len(lines)
			curCol = lead + min(fl.in.Position(), inW)
		}
		var b strings.Builder
		b.WriteString(mark)
		st.label.write(&b, padRight(fl.label, labelWidth))
		b.WriteString("[")
		b.WriteString(padRight(truncate(fl.in.View(), inW+1), inW+1))
		b.WriteString("]")
		st.dim.write(&b, hint)
		lines = append(lines, truncate(b.String(), width))
	}
	return lines, curLine, curCol
}

// leaseWhat says what a lease holds, in the board's words: "GPUs 2,3", a
// MIG lease by its instance ("MIG 3g.40gb (0:1) of GPU 0"), a budget by its
// size ("20.0 GiB of GPU 1"). b is the board that knows the instances.
func leaseWhat(l *lease.Lease, b *api.Board) string {
	switch {
	case l.MIG != "" && len(l.GPUs) == 1:
		for _, n := range b.Nodes {
			if n.Name != l.Node {
				continue
			}
			for _, g := range n.GPUs {
				for _, d := range g.MIGDevices {
					if g.Index == l.GPUs[0] && d.UUID == l.MIG {
						return fmt.Sprintf("MIG %s (%d:%d) of GPU %d", d.Profile, g.Index, d.Index, g.Index)
					}
				}
			}
		}
		return "a MIG instance of GPU " + strconv.Itoa(l.GPUs[0])
	case l.MemMiB > 0 && len(l.GPUs) == 1:
		return gib(l.MemMiB) + " GiB of GPU " + strconv.Itoa(l.GPUs[0])
	}
	return gpuList(l.GPUs)
}

// gpuList says "GPU 3" or "GPUs 2,3".
func gpuList(gpus []int) string {
	return plural(len(gpus), "GPU ", "GPUs ") + joinInts(gpus)
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ",")
}
