//go:build !cgo

package main

//go:noinline
func leafC() uint64 { return spin(1000000) }
