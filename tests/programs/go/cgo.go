//go:build cgo

package main

// static unsigned long long cspin(int n)
// {
// 	unsigned long long x = 1;
// 	for (int i = 0; i < n; i++)
// 		x = x * 6364136223846793005ull + 1442695040888963407ull;
// 	return x;
// }
import "C"

//go:noinline
func leafC() uint64 { return uint64(C.cspin(1000000)) }
