package lease_test

import (
	"testing"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
)

func TestParseMem(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr string
	}{
		{"20G", 20480, ""},
		{"20gb", 20480, ""},
		{"20 GiB", 20480, ""},
		{"1.5G", 1536, ""},
		{"512M", 512, ""},
		{"512MiB", 512, ""},
		{"2T", 2 << 20, ""},
		{"24", 24576, ""}, // a bare number is GiB, as people say it
		{"", 0, "cannot read memory size"},
		{"20X", 0, "cannot read memory size"},
		{"-1G", 0, "less than 1 MiB"},
		{"0.0001M", 0, "less than 1 MiB"},
		{"999T", 0, "larger than any GPU"},
		{"NaNG", 0, "cannot read"},
	}
	for _, tt := range tests {
		got, err := lease.ParseMem(tt.in)
		if tt.wantErr != "" {
			checkRefusal(t, err, refusal.CodeInvalid, tt.wantErr)
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseMem(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
	for mib, want := range map[uint64]string{512: "512 MiB", 20480: "20 GiB", 7680: "7.5 GiB"} {
		if got := lease.FormatMem(mib); got != want {
			t.Errorf("FormatMem(%d) = %q, want %q", mib, got, want)
		}
	}
}
