//go:build !(linux && cgo)

package nvml

import (
	"context"
	"errors"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

// Open is unavailable in this build: NVML is reached through cgo, and
// this binary was built without it (or not for Linux). probe.Open then
// falls back to nvidia-smi.
func Open(ctx context.Context, opts nodeprobe.Options) (nodeprobe.Probe, error) {
	return nil, errors.New("NVML: not available in this build (built without cgo)")
}
