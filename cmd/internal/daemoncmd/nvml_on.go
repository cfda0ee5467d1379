//go:build linux && cgo && nvml

package daemoncmd

// nvmlBuilt says whether nodeprobe's NVML backend is compiled in: it needs
// cgo on Linux and the nvml tag (nodeprobe/nvml/driver.go), else the agent
// uses nvidia-smi.
const nvmlBuilt = true
