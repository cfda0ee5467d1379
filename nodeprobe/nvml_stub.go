//go:build !(linux && cgo)

package nodeprobe

import (
	"context"
	"errors"
)

// OpenNVML is unavailable in this build: NVML is reached through cgo, and
// this binary was built without it (or not for Linux). Open then falls back
// to nvidia-smi.
func OpenNVML(ctx context.Context, opts Options) (Probe, error) {
	return nil, errors.New("NVML: not available in this build (built without cgo)")
}
