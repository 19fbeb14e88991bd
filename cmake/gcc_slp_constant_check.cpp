// Exits 0 where the compiler builds the vector {4, 4, 0, 0} as written.
//
// Debian 12's GCC 12.2 (12.2.0-14) with AVX-512 enabled (-march=native on an
// AVX-512 CPU, -mavx512f, x86-64-v4) at -O2/-O3 turns the copy of such a
// 32-byte constant (equal leading values, then zeros) into a broadcast of the
// first value, so the vector holds {4, 4, 4, 4}: wrong code, found through
// pad(x, {4, 4, 0, 0}) in tests/test_pad.cpp. The superword-level
// parallelism (SLP) vectorizer makes the 256-bit constant store;
// -fno-tree-slp-vectorize avoids it (cmake/gcc_slp_constant_check.cmake).
#include <cstdint>
#include <vector>

__attribute__((noipa)) int64_t third(const std::vector<int64_t>& v) { return v[2]; }

int main() { return third({4, 4, 0, 0}) == 0 ? 0 : 1; }
