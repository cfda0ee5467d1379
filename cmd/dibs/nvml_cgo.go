//go:build linux && cgo

package main

// nvmlBuilt says whether nodeprobe's NVML backend is compiled in: it needs
// cgo on Linux (nodeprobe/nvml/driver.go), else the agent uses nvidia-smi.
const nvmlBuilt = true
