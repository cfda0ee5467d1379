//go:build !(linux && cgo && nvml)

package daemoncmd

// nvmlBuilt is false in a build without cgo or without the nvml tag:
// nodeprobe then has only its nvidia-smi and simulated backends
// (nodeprobe/nvml/stub.go).
const nvmlBuilt = false
