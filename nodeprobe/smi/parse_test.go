package smi

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSplitCSVLine(t *testing.T) {
	tests := []struct {
		line    string
		want    []string
		wantErr bool
	}{
		{"a, b, c", []string{"a", "b", "c"}, false},
		{"  a ,b,   c  ", []string{"a", "b", "c"}, false},
		{"a,,c", []string{"a", "", "c"}, false},
		{"a,", []string{"a", ""}, false},
		{`a, "b, c", d`, []string{"a", "b, c", "d"}, false},
		{`"say ""hi""", x`, []string{`say "hi"`, "x"}, false},
		{`a, "b",`, []string{"a", "b", ""}, false},
		{`a, "unterminated`, nil, true},
		{`a, "b" c`, nil, true},
		{"", []string{""}, false},
	}
	for _, tt := range tests {
		got, err := splitCSVLine(tt.line)
		if (err != nil) != tt.wantErr || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("splitCSVLine(%q) = %q, %v; want %q, error %v", tt.line, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseQueryGPUFixtures(t *testing.T) {
	type row struct {
		index       int
		model       string
		bus         string
		total, used uint64
		util, temp  *int
		draw, limit *float64
		mig         nodeprobe.MIGMode
	}
	tests := []struct {
		file   string
		driver string
		rows   []row // checked in order; fewer rows than GPUs checks a prefix
		count  int
	}{
		{"h100x8-gpu.csv", "550.54.15", []row{
			{0, "NVIDIA H100 80GB HBM3", "00000000:1B:00.0", 81559, 30012, nodeprobe.IntPtr(95), nodeprobe.IntPtr(61), nodeprobe.FloatPtr(612.45), nodeprobe.FloatPtr(700), nodeprobe.MIGDisabled},
			{1, "NVIDIA H100 80GB HBM3", "00000000:43:00.0", 81559, 30012, nodeprobe.IntPtr(97), nodeprobe.IntPtr(63), nodeprobe.FloatPtr(640.10), nodeprobe.FloatPtr(700), nodeprobe.MIGDisabled},
		}, 8},
		{"a100-mig-gpu.csv", "535.129.03", []row{
			{0, "NVIDIA A100-SXM4-80GB", "00000000:07:00.0", 81920, 19234, nil, nodeprobe.IntPtr(34), nodeprobe.FloatPtr(62.15), nodeprobe.FloatPtr(400), nodeprobe.MIGEnabled},
			{1, "NVIDIA A100-SXM4-80GB", "00000000:0F:00.0", 81920, 4, nodeprobe.IntPtr(0), nodeprobe.IntPtr(31), nodeprobe.FloatPtr(55.20), nodeprobe.FloatPtr(400), nodeprobe.MIGDisabled},
		}, 2},
		{"consumer-gpu.csv", "550.54.14", []row{
			{0, "NVIDIA GeForce RTX 4090", "00000000:01:00.0", 24564, 1345, nodeprobe.IntPtr(3), nodeprobe.IntPtr(41), nil, nil, nodeprobe.MIGUnsupported},
			{1, "NVIDIA GeForce GTX 1080 Ti", "00000000:02:00.0", 11264, 0, nil, nodeprobe.IntPtr(29), nil, nodeprobe.FloatPtr(250), nodeprobe.MIGUnsupported},
		}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			gpus, driver, err := parseQueryGPU(readFixture(t, tt.file))
			if err != nil {
				t.Fatalf("parseQueryGPU: %v", err)
			}
			if len(gpus) != tt.count || driver != tt.driver {
				t.Fatalf("got %d gpus, driver %q; want %d, %q", len(gpus), driver, tt.count, tt.driver)
			}
			for i, w := range tt.rows {
				g := gpus[i]
				got := row{g.Index, g.Model, g.PCIBusID, g.MemoryTotalMiB, g.MemoryUsedMiB, g.UtilizationPct, g.TemperatureC, g.PowerDrawW, g.PowerLimitW, g.MIG}
				if !reflect.DeepEqual(got, w) {
					t.Errorf("gpu %d:\n got %s\nwant %s", i, fmtRow(got), fmtRow(w))
				}
				if g.UUID == "" || g.Processes == nil {
					t.Errorf("gpu %d: uuid %q, processes %v; want a uuid and an empty list", i, g.UUID, g.Processes)
				}
			}
		})
	}
}

// fmtRow prints a row with its pointers followed, so a failure shows values.
func fmtRow(r any) string {
	v := reflect.ValueOf(r)
	parts := make([]string, v.NumField())
	for i := range v.NumField() {
		f := v.Field(i)
		switch {
		case f.Kind() == reflect.Pointer && f.IsNil():
			parts[i] = "nil"
		case f.Kind() == reflect.Pointer:
			parts[i] = fmt.Sprint(f.Elem().Interface())
		default:
			parts[i] = fmt.Sprint(f.Interface())
		}
	}
	return strings.Join(parts, " ")
}

func TestParseQueryGPUErrors(t *testing.T) {
	good := "0, GPU-a, 00000000:1B:00.0, NVIDIA H100 80GB HBM3, 81559, 0, 0, 33, 69.88, 700.00, Disabled, 550.54.15"
	tests := []struct {
		name string
		data string
		want string // a piece the error must contain
	}{
		{"too few columns", "0, GPU-a, 00000000:1B:00.0, NVIDIA H100", "line 1"},
		{"too many columns", good + ", extra", "13 columns, want 12"},
		{"error names the second line", good + "\n1, GPU-b, x", "line 2"},
		{"index not a number", strings.Replace(good, "0,", "zero,", 1), "index"},
		{"negative index", strings.Replace(good, "0,", "-1,", 1), "index"},
		{"missing uuid", strings.Replace(good, "GPU-a", "[N/A]", 1), "uuid: missing"},
		{"uuid with spaces", strings.Replace(good, "GPU-a", "GPU a", 1), "uuid"},
		{"memory with units", strings.Replace(good, "81559", "81559 MiB", 1), "memory.total"},
		{"utilization over 100", strings.Replace(good, " 0, 33", " 101, 33", 1), "utilization.gpu"},
		{"power NaN", strings.Replace(good, "69.88", "NaN", 1), "power.draw"},
		{"power negative", strings.Replace(good, "69.88", "-1", 1), "power.draw"},
		{"odd mig mode", strings.Replace(good, "Disabled", "Maybe", 1), "mig.mode.current"},
		{"duplicate index", good + "\n" + strings.Replace(good, "GPU-a", "GPU-b", 1), "listed twice"},
		{"unterminated quote", `0, "GPU-a, x`, "unterminated"},
		{"control character in name", strings.Replace(good, "NVIDIA H100", "NVIDIA\x01H100", 1), "name"},
		{"driver failure text", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "1 columns"},
		{"too large", strings.Repeat("x", maxSMIOutput+1), "exceeds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gpus, _, err := parseQueryGPU([]byte(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("parseQueryGPU error = %v (gpus %d), want one containing %q", err, len(gpus), tt.want)
			}
		})
	}
}

func TestParseQueryGPUUnavailableValues(t *testing.T) {
	for _, v := range []string{"[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", "[Insufficient Permissions]", "[GPU requires reset]"} {
		line := "0, GPU-a, " + v + ", NVIDIA L4, 23034, " + v + ", " + v + ", " + v + ", " + v + ", " + v + ", " + v + ", " + v
		gpus, driver, err := parseQueryGPU([]byte(line))
		if err != nil {
			t.Errorf("%s: %v", v, err)
			continue
		}
		g := gpus[0]
		if g.PCIBusID != "" || g.MemoryUsedMiB != 0 || g.UtilizationPct != nil || g.TemperatureC != nil ||
			g.PowerDrawW != nil || g.PowerLimitW != nil || g.MIG != nodeprobe.MIGUnsupported || driver != "" {
			t.Errorf("%s: got %+v driver %q, want every optional field unknown", v, g, driver)
		}
	}
}

func TestParseComputeApps(t *testing.T) {
	tests := []struct {
		file string
		want []smiApp
	}{
		{"h100x8-apps.csv", []smiApp{
			{"GPU-2a4f1c7e-8b3d-4e5f-9a6b-1c2d3e4f5a60", 4242, "/usr/bin/python3", 30000},
			{"GPU-3b5a2d8f-9c4e-4f60-8b7c-2d3e4f5a6b71", 4243, "/usr/bin/python3", 30000},
			{"GPU-6e8d50bc-cf71-4293-beaf-5a6b7c8d9ea4", 5151, "/opt/my,odd/bin/python", 1012},
		}},
		{"a100-mig-apps.csv", []smiApp{
			{"GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3b", 7001, "python", 18000},
			{"GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3b", 7002, "", 0},
		}},
		{"consumer-apps.csv", []smiApp{
			{"GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d", 3130, "/opt/odd,name/python", 200},
			{"GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d", 3131, "Xorg", 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := parseComputeApps(readFixture(t, tt.file))
			if err != nil {
				t.Fatalf("parseComputeApps: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseComputeAppsEdges(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		count   int
		wantErr string
	}{
		{"empty", "", 0, ""},
		{"blank lines", "\n\n  \n", 0, ""},
		{"no processes message", "No running processes found\n", 0, ""},
		{"three columns", "GPU-a, 12, python\n", 0, "line 1"},
		{"pid zero", "GPU-a, 0, python, 10\n", 0, "pid"},
		{"pid not a number", "GPU-a, twelve, python, 10\n", 0, "pid"},
		{"memory not a number", "GPU-a, 12, python, lots\n", 0, "used_memory"},
		{"second line bad", "GPU-a, 12, python, 10\nGPU-a, 13\n", 0, "line 2"},
		{"too large", strings.Repeat("x", maxSMIOutput+1), 0, "exceeds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseComputeApps([]byte(tt.data))
			if tt.wantErr == "" {
				if err != nil || len(got) != tt.count {
					t.Errorf("got %d apps, %v; want %d, nil", len(got), err, tt.count)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseListGPUs(t *testing.T) {
	got, err := parseListGPUs(readFixture(t, "a100-mig-list.txt"))
	if err != nil {
		t.Fatal(err)
	}
	parent := "GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3b"
	want := []smiMIG{
		{parent, nodeprobe.MIGDevice{Index: 0, UUID: "MIG-c7384736-a75d-5afc-978f-d2f1294409fd", Profile: "3g.40gb", MemoryTotalMiB: 40960}},
		{parent, nodeprobe.MIGDevice{Index: 1, UUID: "MIG-a28ad590-3fda-56dd-84fc-0a0b96edc58d", Profile: "2g.20gb", MemoryTotalMiB: 20480}},
		{parent, nodeprobe.MIGDevice{Index: 2, UUID: "MIG-1f2e3d4c-5b6a-5978-8695-a4b3c2d1e0f9", Profile: "1g.10gb", MemoryTotalMiB: 10240}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}

	bad := []struct{ name, data, want string }{
		{"mig before gpu", "  MIG 1g.10gb Device 0: (UUID: MIG-x)\n", "before any GPU"},
		{"no uuid", "GPU 0: NVIDIA A100\n", "UUID"},
		{"odd mig line", "GPU 0: A (UUID: GPU-a)\n  MIG 1g.10gb Thing 0: (UUID: MIG-x)\n", "line 2"},
		{"stray text", "hello\n", "neither"},
	}
	for _, tt := range bad {
		if _, err := parseListGPUs([]byte(tt.data)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error = %v, want one containing %q", tt.name, err, tt.want)
		}
	}
}

func TestProfileMiB(t *testing.T) {
	tests := map[string]uint64{"1g.10gb": 10240, "1c.3g.40gb": 40960, "1g.10gb+me": 10240, "7g.80gb": 81920, "odd": 0, "1g.xgb": 0}
	for in, want := range tests {
		if got := profileMiB(in); got != want {
			t.Errorf("profileMiB(%q) = %d, want %d", in, got, want)
		}
	}
}
