package nodeprobe

import "testing"

func TestParseBackend(t *testing.T) {
	tests := []struct {
		in      string
		want    Backend
		wantErr bool
	}{
		{"", BackendAuto, false},
		{"auto", BackendAuto, false},
		{"NVML", BackendNVML, false},
		{" nvidia-smi ", BackendNvidiaSMI, false},
		{"sim", BackendSim, false},
		{"smi", "", true},
		{"cuda", "", true},
	}
	for _, tt := range tests {
		got, err := ParseBackend(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseBackend(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
