//go:build !(linux && cgo)

package main

// nvmlBuilt is false in a build without cgo: nodeprobe then has only its
// nvidia-smi and simulated backends (nodeprobe/nvml_stub.go).
const nvmlBuilt = false
