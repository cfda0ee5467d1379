// Package nvml is the NVML backend of nodeprobe: the driver's own library,
// reached through cgo (github.com/NVIDIA/go-nvml), the most complete and
// cheapest source. It has two layers, as hashicorp/nomad-device-nvidia does:
// driver.go turns NVML calls into Go values and errors, probe.go builds
// nodeprobe snapshots from them. Both carry `//go:build linux && cgo && nvml`;
// in other builds Open says NVML is not available, so CGO_ENABLED=0 builds
// work, and a build without the tag compiles none of NVML's header (whose
// deprecation warnings a newcomer's first `go run` would otherwise print).
// The release builds dibsd with `-tags nvml`. Nothing outside this package sees an nvml.Return.
package nvml
