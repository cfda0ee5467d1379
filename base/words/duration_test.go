package words_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
)

const day = 24 * time.Hour

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		msg  string // for a refusal: what it must say
	}{
		{in: "2d", want: 2 * day},
		{in: "1d12h", want: 36 * time.Hour},
		{in: "90m", want: 90 * time.Minute},
		{in: "1h30m", want: 90 * time.Minute},
		{in: " 45s\n", want: 45 * time.Second},
		{in: "1d0s", want: day},
		{in: "3650d", want: words.MaxDuration},
		{in: "0", msg: "duration must be positive, got 0s"},
		{in: "0d", msg: "must be positive"},
		{in: "-5m", msg: "duration must be positive, got -5m"},
		{in: "", msg: "empty duration"},
		{in: "   ", msg: "empty duration"},
		{in: "garbage", msg: `cannot read duration "garbage": write it like 30m, 4h or 2d`},
		{in: "d", msg: `cannot read duration "d"`},
		{in: "2D", msg: `cannot read duration "2D"`},
		{in: "1.5d", msg: `cannot read duration "1.5d"`},
		{in: "-1d", msg: `cannot read duration "-1d"`},
		{in: "1d-5h", msg: `cannot read duration "1d-5h"`},
		{in: "1d+5h", msg: `cannot read duration "1d+5h"`},
		{in: "1dxyz", msg: `cannot read duration "1dxyz"`},
		{in: "1d1d", msg: `cannot read duration "1d1d"`},
		{in: "1h2d", msg: `cannot read duration "1h2d"`},
		{in: "3651d", msg: `cannot read duration "3651d"`},
		{in: "99999999999999999999d", msg: "cannot read duration"},
		{in: "9999999999999h", msg: "cannot read duration"},
		{in: "2562047h", msg: `duration "2562047h" is longer than 3650d`},
		{in: "3650d1ns", msg: "is longer than 3650d"},
		{in: "3650d2562047h", msg: "is longer than 3650d"},
		{in: strings.Repeat("9", 4096) + "h", msg: `cannot read duration "99999999999999999999999999999999"...:`},
	}
	for _, tt := range tests {
		got, err := words.ParseDuration(tt.in)
		if tt.msg == "" {
			if err != nil || got != tt.want {
				t.Errorf("ParseDuration(%q) = %s, %v; want %s", tt.in, got, err, tt.want)
			}
			continue
		}
		if err == nil {
			t.Errorf("ParseDuration(%q) = %s, want a refusal saying %q", tt.in, got, tt.msg)
			continue
		}
		if refusal.CodeOf(err) != refusal.CodeInvalid || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("ParseDuration(%q) refused with %q (%s), want %s saying %q", tt.in, err, refusal.CodeOf(err), refusal.CodeInvalid, tt.msg)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{400 * time.Millisecond, "0s"},
		{30 * time.Second, "30s"},
		{59*time.Second + 600*time.Millisecond, "1m"},
		{45*time.Minute + 59*time.Second, "45m"},
		{3*time.Hour + 20*time.Minute, "3h20m"},
		{3*time.Hour + 5*time.Minute, "3h05m"},
		{4 * time.Hour, "4h"},
		{36 * time.Hour, "1d12h"},
		{36*time.Hour + 30*time.Minute, "1d12h"},
		{2 * day, "2d"},
		{-5 * time.Minute, "-5m"},
		{-26 * time.Hour, "-1d2h"},
		{words.MaxDuration, "3650d"},
	}
	for _, tt := range tests {
		if got := words.FormatDuration(tt.d); got != tt.want {
			t.Errorf("FormatDuration(%s) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{
		"2d", "1d12h", "90m", "1h30m", "45s", "0", "-5m", "garbage", "", "d", "1d-5h",
		"3650d", "3651d", "2562047h", "3650d2562047h", "9223372036854775807ns", "1.5h",
		"1d1d", "1dd", " 4h ", "+2h", "1µs", "1d0.5h", "00000000000000000001d",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := words.ParseDuration(s)
		if err != nil {
			if refusal.CodeOf(err) != refusal.CodeInvalid {
				t.Fatalf("ParseDuration(%q): error %q is not an invalid-request refusal", s, err)
			}
			if len(err.Error()) > 200 {
				t.Fatalf("ParseDuration(%q): message runs to %d bytes", s, len(err.Error()))
			}
			return
		}
		if d <= 0 || d > words.MaxDuration {
			t.Fatalf("ParseDuration(%q) = %d, outside (0, %s]", s, d, words.MaxDuration)
		}
		// What dibs prints, a person can type back: it reads again to
		// within the unit FormatDuration drops.
		if d < time.Second {
			return
		}
		out := words.FormatDuration(d)
		back, err := words.ParseDuration(out)
		if err != nil {
			t.Fatalf("ParseDuration(%q) = %s, printed %q, which does not read back: %v", s, d, out, err)
		}
		tol := time.Minute
		if d >= day {
			tol = time.Hour
		}
		if diff := (d - back).Abs(); diff >= tol {
			t.Fatalf("ParseDuration(%q) = %s, printed %q, read back as %s", s, d, out, back)
		}
	})
}
