//go:build !(linux && cgo && nvml)

package nvml

import (
	"context"
	"errors"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

// Open is unavailable in this build: NVML is reached through cgo and is
// built only with the nvml tag (the release's dibsd has both), so a plain
// `go run ./cmd/dibsd demo` compiles no NVML header and prints no warning.
// probe.Open then falls back to nvidia-smi.
func Open(ctx context.Context, opts nodeprobe.Options) (nodeprobe.Probe, error) {
	return nil, errors.New("NVML: not available in this build (built without cgo or without -tags nvml)")
}
