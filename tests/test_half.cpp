// Float16 and BFloat16: conversions bit for bit against PyTorch on every
// 16-bit pattern and ~1M float32/float64/int64 inputs (tests/goldens/
// half_conversions.bin, made by scripts/make_half_fixture.py), through each
// conversion loop compiled in, the scalar functions and Tensor::to; rounding
// by hand; factories, fill_, item, printing, the overflow error, and
// safetensors round trips.
#include <zlib.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "minidl/core/safetensors.h"
#include "minidl/ops/cpu/convert_half.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

// ---- the fixture -------------------------------------------------------------------

template <class T>
struct Inputs {
  std::vector<T> in;
  std::vector<uint16_t> f16, bf16;  // torch's results
};

struct Fixture {
  std::vector<uint32_t> f16_to_f32, bf16_to_f32;  // index: the 16-bit pattern
  std::vector<uint16_t> f16_to_bf16, bf16_to_f16;
  Inputs<uint32_t> f32;  // float32 bits
  Inputs<uint64_t> f64;  // float64 bits
  Inputs<int64_t> i64;
};

struct PayloadReader {
  const std::vector<unsigned char>& bytes;
  size_t pos = 0;

  template <class T>
  std::vector<T> array(size_t n) {
    REQUIRE(pos + n * sizeof(T) <= bytes.size());
    std::vector<T> v(n);
    std::memcpy(v.data(), bytes.data() + pos, n * sizeof(T));
    pos += n * sizeof(T);
    return v;
  }
  uint32_t count() { return array<uint32_t>(1)[0]; }
  template <class T>
  Inputs<T> inputs() {
    Inputs<T> s;
    const uint32_t n = count();
    // Stored as differences from the previous input, modulo 2^bits.
    using U = std::make_unsigned_t<T>;
    const std::vector<U> d = array<U>(n);
    U acc = 0;
    for (U x : d) s.in.push_back(static_cast<T>(acc += x));
    s.f16 = array<uint16_t>(n);
    s.bf16 = array<uint16_t>(n);
    return s;
  }
};

const Fixture& fixture() {
  static const Fixture fx = [] {
    const std::string path = std::string(MINIDL_GOLDENS_DIR) + "/half_conversions.bin";
    std::ifstream f(path, std::ios::binary);
    REQUIRE_MESSAGE(f.good(), "cannot open ", path);
    std::vector<unsigned char> file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    REQUIRE(file.size() > 16);
    REQUIRE(std::memcmp(file.data(), "MDLHALF1", 8) == 0);
    uint64_t size = 0;
    std::memcpy(&size, file.data() + 8, 8);
    std::vector<unsigned char> payload(size);
    uLongf got = static_cast<uLongf>(size);
    REQUIRE(uncompress(payload.data(), &got, file.data() + 16, static_cast<uLong>(file.size() - 16)) == Z_OK);
    REQUIRE(got == size);
    PayloadReader r{payload};
    Fixture fx;
    REQUIRE(r.count() == 65536);
    fx.f16_to_f32 = r.array<uint32_t>(65536);
    REQUIRE(r.count() == 65536);
    fx.bf16_to_f32 = r.array<uint32_t>(65536);
    REQUIRE(r.count() == 65536);
    fx.f16_to_bf16 = r.array<uint16_t>(65536);
    REQUIRE(r.count() == 65536);
    fx.bf16_to_f16 = r.array<uint16_t>(65536);
    fx.f32 = r.inputs<uint32_t>();
    fx.f64 = r.inputs<uint64_t>();
    fx.i64 = r.inputs<int64_t>();
    REQUIRE(r.pos == payload.size());
    return fx;
  }();
  return fx;
}

bool f16_nan(uint64_t h) { return (h & 0x7FFF) > 0x7C00; }
bool bf16_nan(uint64_t b) { return (b & 0x7FFF) > 0x7F80; }
bool f32_nan(uint64_t x) { return (x & 0x7FFFFFFF) > 0x7F800000; }
bool f64_nan(uint64_t x) { return (x & 0x7FFFFFFFFFFFFFFF) > 0x7FF0000000000000; }

using NanTest = bool (*)(uint64_t);
NanTest nan_test(DType d) {
  switch (d) {
    case kFloat16: return f16_nan;
    case kBFloat16: return bf16_nan;
    case kFloat32: return f32_nan;
    default: return f64_nan;
  }
}

// PyTorch's float->bfloat16 (and double->, float16->bfloat16) turns every NaN
// into 0xFFFF in its vector loop (0x7FC0 in some scalar tails); minidl keeps
// the sign and top payload bits (as vcvtneps2bf16 does). So where torch's
// bfloat16 result is NaN, "both NaN" is the check (nan_any). Every other
// result must match bit for bit, float16 NaNs included: torch's vcvtps2ph
// keeps payloads exactly as minidl does.
struct Expect {
  const char* what;
  DType out;       // dtype of the results
  bool nan_any;    // see above
};

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Compares results with torch's: actual[i] against expected[first + i * step].
void check_bits(const Expect& e, const std::vector<uint64_t>& inputs, const std::vector<uint64_t>& expected,
                const std::vector<uint64_t>& actual, size_t first = 0, size_t step = 1) {
  const NanTest is_nan = nan_test(e.out);
  REQUIRE((actual.empty() || first + (actual.size() - 1) * step < expected.size()));
  size_t bad = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const size_t k = first + i * step;
    const bool ok = e.nan_any && is_nan(expected[k]) ? is_nan(actual[i]) : actual[i] == expected[k];
    if (!ok && bad++ < 5)
      FAIL_CHECK(std::string(e.what), ": input ", hex(inputs[k]), " expected ", hex(expected[k]), " got ",
                 hex(actual[i]), " (index ", k, ")");
  }
  CHECK_MESSAGE(bad == 0, std::string(e.what), ": ", bad, " of ", actual.size(), " results differ");
}

// The bits of every element of a Float16/BFloat16/Float32/Float64 tensor.
std::vector<uint64_t> bits_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const size_t w = element_size(c.dtype()), n = static_cast<size_t>(c.numel());
  std::vector<uint64_t> out(n, 0);
  const auto* p = static_cast<const unsigned char*>(c.raw_data());
  for (size_t i = 0; i < n; ++i) std::memcpy(&out[i], p + i * w, w);  // little-endian
  return out;
}

template <class T>
std::vector<uint64_t> widen(const std::vector<T>& v) {
  std::vector<uint64_t> out;
  for (T x : v) out.push_back(static_cast<uint64_t>(x));
  return out;
}

template <class T>
Tensor from_values(const std::vector<T>& v, DType dtype) {
  return from_buffer(v.data(), {static_cast<int64_t>(v.size())}, dtype);
}

// Tensor::to and copy_ on slices that give the vector loops a body and a tail
// (long, misaligned, short, shorter than one vector), a strided source and a
// strided destination (the scalar strided loop).
void check_tensor_path(const Expect& e, const Tensor& src, const std::vector<uint64_t>& inputs,
                       const std::vector<uint64_t>& expected) {
  const int64_t n = src.numel();
  REQUIRE(n > 64);
  const std::pair<int64_t, int64_t> slices[] = {{0, n}, {3, n - 3}, {5, 29}, {1, 7}, {n - 17, 17}};
  for (const auto& [start, len] : slices) {
    INFO(std::string(e.what), ": slice [", start, ", ", start + len, ")");
    check_bits(e, inputs, expected, bits_of(src.narrow(0, start, len).to(e.out)), static_cast<size_t>(start));
  }
  const int64_t m = n / 2;
  {
    INFO(std::string(e.what), ": strided source");
    const Tensor pairs = src.narrow(0, 0, 2 * m).reshape({m, 2});
    check_bits(e, inputs, expected, bits_of(pairs.select(1, 1).to(e.out)), 1, 2);
  }
  {
    INFO(std::string(e.what), ": strided destination");
    Tensor dst = empty({m, 2}, e.out).select(1, 0);
    dst.copy_(src.narrow(0, 0, m));
    check_bits(e, inputs, expected, bits_of(dst), 0, 1);
  }
}

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float f32_from(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
double f64_from(uint64_t u) {
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}

}  // namespace

TEST_CASE("float16 and bfloat16 -> float32: all 65,536 bit patterns, as PyTorch") {
  const Fixture& fx = fixture();
  std::vector<Half> h(65536);
  std::vector<BFloat16> b(65536);
  std::vector<uint64_t> pattern(65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    h[i] = Half::from_bits(static_cast<uint16_t>(i));
    b[i] = BFloat16::from_bits(static_cast<uint16_t>(i));
    pattern[i] = i;
  }
  const std::vector<uint64_t> want_h = widen(fx.f16_to_f32), want_b = widen(fx.bf16_to_f32);
  const Expect eh{"f16->f32", kFloat32, false}, eb{"bf16->f32", kFloat32, false};

  SUBCASE("scalar Half/BFloat16 -> float") {
    std::vector<uint64_t> got_h, got_b;
    for (uint32_t i = 0; i < 65536; ++i) {
      got_h.push_back(f32_bits(static_cast<float>(h[i])));
      got_b.push_back(f32_bits(static_cast<float>(b[i])));
    }
    check_bits(eh, pattern, want_h, got_h);
    check_bits(eb, pattern, want_b, got_b);
  }
  SUBCASE("every conversion loop compiled in, every tail length") {
    std::string names;
    for (const HalfConvertKernels& k : all_half_convert_kernels()) names += std::string(" ") + k.name;
    MESSAGE("conversion loops compiled in:", names, "; Tensor::to uses ", std::string(half_convert_kernels().name));
    for (const HalfConvertKernels& k : all_half_convert_kernels()) {
      INFO("kernels ", std::string(k.name));
      for (size_t n : {size_t{65536}, size_t{1}, size_t{7}, size_t{15}, size_t{17}, size_t{33}, size_t{47}}) {
        std::vector<float> out(n);
        k.f16_to_f32(h.data(), out.data(), static_cast<int64_t>(n));
        std::vector<uint64_t> got;
        for (float f : out) got.push_back(f32_bits(f));
        check_bits(eh, pattern, want_h, got);
        k.bf16_to_f32(b.data(), out.data(), static_cast<int64_t>(n));
        got.clear();
        for (float f : out) got.push_back(f32_bits(f));
        check_bits(eb, pattern, want_b, got);
      }
    }
  }
  SUBCASE("Tensor::to") {
    check_tensor_path(eh, from_values(h, kFloat16), pattern, want_h);
    check_tensor_path(eb, from_values(b, kBFloat16), pattern, want_b);
  }
  SUBCASE("float16 <-> bfloat16 (through float32)") {
    check_tensor_path({"f16->bf16", kBFloat16, true}, from_values(h, kFloat16), pattern, widen(fx.f16_to_bf16));
    check_tensor_path({"bf16->f16", kFloat16, false}, from_values(b, kBFloat16), pattern, widen(fx.bf16_to_f16));
  }
  SUBCASE("-> float64 is exact") {
    const std::vector<double> d = from_values(h, kFloat16).to(kFloat64).to_vector<double>();
    for (uint32_t i = 0; i < 65536; ++i) {
      const float f = f32_from(fx.f16_to_f32[i]);
      if (std::isnan(f)) {
        CHECK(std::isnan(d[i]));
      } else if (d[i] != static_cast<double>(f)) {
        FAIL_CHECK("f16->f64 of 0x", std::hex, i, std::dec, ": ", d[i], " != ", f);
      }
    }
  }
}

TEST_CASE("float32 -> float16/bfloat16: ties, neighbours, subnormals, overflow, NaN payloads, as PyTorch") {
  const Inputs<uint32_t>& s = fixture().f32;
  REQUIRE(s.in.size() > 400000);
  std::vector<float> in;
  for (uint32_t u : s.in) in.push_back(f32_from(u));
  const std::vector<uint64_t> inputs = widen(s.in), want_h = widen(s.f16), want_b = widen(s.bf16);
  const Expect eh{"f32->f16", kFloat16, false}, eb{"f32->bf16", kBFloat16, true};

  SUBCASE("scalar Half(float), BFloat16(float)") {
    std::vector<uint64_t> got_h, got_b;
    for (float f : in) {
      got_h.push_back(Half(f).x);
      got_b.push_back(BFloat16(f).x);
    }
    check_bits(eh, inputs, want_h, got_h);
    check_bits(eb, inputs, want_b, got_b);
  }
  SUBCASE("every conversion loop compiled in, every tail length") {
    for (const HalfConvertKernels& k : all_half_convert_kernels()) {
      INFO("kernels ", std::string(k.name));
      for (size_t n : {in.size(), size_t{1}, size_t{7}, size_t{15}, size_t{17}, size_t{33}, size_t{47}}) {
        std::vector<Half> oh(n);
        std::vector<BFloat16> ob(n);
        k.f32_to_f16(in.data(), oh.data(), static_cast<int64_t>(n));
        k.f32_to_bf16(in.data(), ob.data(), static_cast<int64_t>(n));
        std::vector<uint64_t> got_h, got_b;
        for (size_t i = 0; i < n; ++i) {
          got_h.push_back(oh[i].x);
          got_b.push_back(ob[i].x);
        }
        check_bits(eh, inputs, want_h, got_h);
        check_bits(eb, inputs, want_b, got_b);
      }
    }
  }
  SUBCASE("Tensor::to") {
    const Tensor src = from_values(in, kFloat32);
    check_tensor_path(eh, src, inputs, want_h);
    check_tensor_path(eb, src, inputs, want_b);
  }
}

TEST_CASE("float64 and int64 -> float16/bfloat16 go through float32, as PyTorch") {
  const Fixture& fx = fixture();
  SUBCASE("float64") {
    const Inputs<uint64_t>& s = fx.f64;
    std::vector<double> in;
    for (uint64_t u : s.in) in.push_back(f64_from(u));
    const Expect eh{"f64->f16", kFloat16, false}, eb{"f64->bf16", kBFloat16, true};
    std::vector<uint64_t> got_h, got_b;
    for (double d : in) {
      got_h.push_back(convert<Half>(d).x);
      got_b.push_back(convert<BFloat16>(d).x);
    }
    check_bits(eh, s.in, widen(s.f16), got_h);
    check_bits(eb, s.in, widen(s.bf16), got_b);
    check_tensor_path(eh, from_values(in, kFloat64), s.in, widen(s.f16));
    check_tensor_path(eb, from_values(in, kFloat64), s.in, widen(s.bf16));
  }
  SUBCASE("int64") {
    const Inputs<int64_t>& s = fx.i64;
    const std::vector<uint64_t> inputs = widen(s.in);
    const Expect eh{"i64->f16", kFloat16, false}, eb{"i64->bf16", kBFloat16, false};
    std::vector<uint64_t> got_h, got_b;
    for (int64_t v : s.in) {
      got_h.push_back(convert<Half>(v).x);
      got_b.push_back(convert<BFloat16>(v).x);
    }
    check_bits(eh, inputs, widen(s.f16), got_h);
    check_bits(eb, inputs, widen(s.bf16), got_b);
    check_tensor_path(eh, from_values(s.in, kInt64), inputs, widen(s.f16));
    check_tensor_path(eb, from_values(s.in, kInt64), inputs, widen(s.bf16));
  }
}

TEST_CASE("rounding by hand") {
  auto h = [](double v) { return convert<Half>(v).x; };
  auto b = [](double v) { return convert<BFloat16>(v).x; };
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(h(1.0) == 0x3C00);
  CHECK(h(1.0 + 0x1p-11) == 0x3C00);        // tie between 1 and 1+2^-10: to even (down)
  CHECK(h(1.0 + 3 * 0x1p-11) == 0x3C02);    // tie between 1+2^-10 and 1+2^-9: to even (up)
  CHECK(h(1.0 + 0x1p-11 + 0x1p-23) == 0x3C01);  // just above the tie
  CHECK(h(65504.0) == 0x7BFF);              // the largest float16
  CHECK(h(65519.0) == 0x7BFF);
  CHECK(h(65520.0) == 0x7C00);              // the tie above 65504 rounds to even: inf
  CHECK(h(-65520.0) == 0xFC00);
  CHECK(h(0x1p-14) == 0x0400);              // the smallest normal
  CHECK(h(0x1p-24) == 0x0001);              // the smallest subnormal
  CHECK(h(0x1p-25) == 0x0000);              // half of it: a tie, to even (zero)
  CHECK(h(1.5 * 0x1p-25) == 0x0001);
  CHECK(h(3 * 0x1p-25) == 0x0002);          // 1.5 ulp: tie, to even (2)
  CHECK(h(0x3FFp-24) == 0x03FF);            // the largest subnormal
  CHECK(h(-0.0) == 0x8000);
  CHECK(h(inf) == 0x7C00);
  CHECK(h(-inf) == 0xFC00);
  CHECK(f16_nan(h(std::nan(""))));
  // A double just above the tie rounds to the tie in float32 first, then to
  // even: 1.0, not 1+2^-10. PyTorch converts double->float->half too.
  CHECK(h(1.0 + 0x1p-11 + 0x1p-40) == 0x3C00);
  CHECK(static_cast<float>(Half::from_bits(0x0001)) == 0x1p-24f);
  CHECK(static_cast<float>(Half::from_bits(0x7BFF)) == 65504.0f);
  CHECK(static_cast<float>(Half::from_bits(0x3555)) == 0x1.554p-2f);

  CHECK(b(1.0) == 0x3F80);
  CHECK(b(1.0 + 0x1p-8) == 0x3F80);         // tie: to even (down)
  CHECK(b(1.0 + 3 * 0x1p-8) == 0x3F82);     // tie: to even (up)
  CHECK(b(f32_from(0x7F7F7FFF)) == 0x7F7F);  // just below the tie above the largest bfloat16
  CHECK(b(f32_from(0x7F7F8000)) == 0x7F80);  // the tie: inf
  CHECK(b(std::numeric_limits<float>::max()) == 0x7F80);
  CHECK(b(f32_from(0x00000001)) == 0x0000);  // float32 subnormals round like any value
  CHECK(b(f32_from(0x00018000)) == 0x0002);
  CHECK(b(f32_from(0x807FFFFF)) == 0x8080);
  CHECK(bf16_nan(b(std::nan(""))));
  CHECK(BFloat16(f32_from(0x7F800001)).x == 0x7FC0);  // a signalling NaN comes back quiet
  CHECK(Half(f32_from(0xFF812345)).x == 0xFE09);      // sign and top payload bits kept
}

TEST_CASE("to() between float16/bfloat16 and float64, int64, uint8") {
  const Tensor h = tensor({1.5, -2.5, 65504.0, 0.1, -0.0}, {}, kFloat16);
  CHECK(h.dtype() == kFloat16);
  CHECK(h.to(kFloat64).to_vector<double>() == std::vector<double>{1.5, -2.5, 65504.0, 0.0999755859375, -0.0});
  CHECK(h.to(kInt64).to_vector<int64_t>() == std::vector<int64_t>{1, -2, 65504, 0, 0});  // truncates
  CHECK(tensor({0.1, 2.5}, {}, kBFloat16).to(kFloat64).to_vector<double>() ==
        std::vector<double>{0.10009765625, 2.5});

  std::vector<uint8_t> bytes(256);
  for (int i = 0; i < 256; ++i) bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  const Tensor u8 = tensor(bytes);
  CHECK(u8.to(kFloat16).to(kUInt8).to_vector<uint8_t>() == bytes);  // exact in float16
  CHECK(u8.to(kBFloat16).to(kUInt8).to_vector<uint8_t>() == bytes);  // 8 significant bits: exact too
  CHECK(tensor(std::vector<int64_t>{257, 259, 32769}).to(kBFloat16).to(kInt64).to_vector<int64_t>() ==
        std::vector<int64_t>{256, 260, 32768});  // ties to even

  std::vector<int64_t> ints;
  for (int64_t i = -2048; i <= 2048; ++i) ints.push_back(i);
  CHECK(tensor(ints).to(kFloat16).to(kInt64).to_vector<int64_t>() == ints);  // exact up to 2^11
  CHECK(tensor(std::vector<int64_t>{2049, 4097}).to(kFloat16).to(kInt64).to_vector<int64_t>() ==
        std::vector<int64_t>{2048, 4096});

  // Same-dtype copies keep every bit, signalling NaNs included.
  const std::vector<uint16_t> odd{0x7C01, 0xFFFF, 0x0001, 0x8000};
  CHECK(bits_of(from_values(odd, kFloat16).clone()) == widen(odd));
  CHECK(bits_of(from_values(odd, kBFloat16).reshape({2, 2}).t().contiguous()) ==
        std::vector<uint64_t>{0x7C01, 0x0001, 0xFFFF, 0x8000});
}

TEST_CASE("factories, fill_, item, to_vector") {
  for (DType d : {kFloat16, kBFloat16}) {
    INFO(std::string(dtype_name(d)));
    CHECK(zeros({2, 3}, d).dtype() == d);
    CHECK(zeros({2, 3}, d).to_vector<float>() == std::vector<float>(6, 0.0f));
    CHECK(ones({4}, d).to_vector<float>() == std::vector<float>(4, 1.0f));
    CHECK(full({3}, -2.25, d).to_vector<float>() == std::vector<float>(3, -2.25f));
    CHECK(empty({5}, d).nbytes() == 10);
    CHECK(arange(0.0, 5.0, 1.5, d).to_vector<float>() == std::vector<float>{0.0f, 1.5f, 3.0f, 4.5f});
    CHECK(tensor(std::vector<float>{1, 2, 3, 4}, {2, 2}, d).to_vector<double>() ==
          std::vector<double>{1, 2, 3, 4});
    CHECK(scalar_tensor(3.0, d).item<float>() == 3.0f);
    CHECK(full_like(ones({2}, d), 7.0).dtype() == d);

    manual_seed(7);
    const Tensor r = rand({1000}, d);
    CHECK(r.dtype() == d);
    for (float v : r.to_vector<float>()) CHECK((v >= 0.0f && v <= 1.0f));  // may round up to 1
    const Tensor n = randn({1000}, d);
    double mean = 0;
    for (float v : n.to_vector<float>()) mean += v / 1000.0;
    CHECK(std::abs(mean) < 0.2);

    Tensor t = zeros({2, 2}, d);
    t.fill_(0.5);
    CHECK(t.to_vector<float>() == std::vector<float>(4, 0.5f));
    t.select(1, 0).fill_(-3.0);  // strided
    CHECK(t.to_vector<float>() == std::vector<float>{-3.0f, 0.5f, -3.0f, 0.5f});
    t.zero_();
    CHECK(t.to_vector<float>() == std::vector<float>(4, 0.0f));
    t.copy_(tensor({1.0, 2.0}));  // broadcast float32 into it
    CHECK(t.to_vector<float>() == std::vector<float>{1.0f, 2.0f, 1.0f, 2.0f});
    CHECK(t[1][1].item<double>() == 2.0);
    CHECK(t[0][0].item<int64_t>() == 1);
  }
  CHECK(full({1}, 0.1, kFloat16).item<float>() == 0.0999755859375f);
  CHECK(full({1}, 0.1, kFloat16).to_vector<Half>()[0].x == 0x2E66);
  CHECK(tensor(std::vector<Half>{Half(1.0f), Half::from_bits(0x7C00)}).dtype() == kFloat16);
  CHECK(std::isinf(tensor(std::vector<BFloat16>{BFloat16(2.0f), BFloat16(-INFINITY)}).to_vector<float>()[1]));
}

TEST_CASE("a float16 scalar that does not fit is an error, not inf (PyTorch's check)") {
  CHECK_THROWS_CONTAINS(full({2}, 1e5, kFloat16), "value cannot be converted to type c10::Half without overflow");
  CHECK_THROWS_CONTAINS(full({2}, -1e5, kFloat16), "c10::Half without overflow");
  // PyTorch compares with the largest value, not the rounded one: 65504.5 is refused too.
  CHECK_THROWS_CONTAINS(full({2}, 65504.5, kFloat16), "c10::Half without overflow");
  CHECK_THROWS_CONTAINS(full_like(zeros({2}, kFloat16), 7e4), "c10::Half without overflow");
  Tensor t16 = zeros({2}, kFloat16);
  CHECK_THROWS_CONTAINS(t16.fill_(1e5), "fill_: value cannot be converted to type c10::Half without overflow");
  CHECK_THROWS_CONTAINS(zeros({2}, kBFloat16).fill_(3.4e38), "value cannot be converted to type c10::BFloat16");
  CHECK(full({1}, 1e38, kBFloat16).item<float>() == BFloat16(1e38f).operator float());
  CHECK(full({1}, -65504.0, kFloat16).item<float>() == -65504.0f);
  // inf and NaN are values a float16 holds.
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(std::isinf(full({1}, inf, kFloat16).item<float>()));
  CHECK(std::isinf(t16.fill_(-inf).to_vector<float>()[1]));
  CHECK(std::isnan(full({1}, std::nan(""), kBFloat16).item<float>()));
  // Converting a tensor is not a scalar check: values beyond the range become inf, as in PyTorch.
  CHECK(std::isinf(tensor({1e5}).to(kFloat16).item<float>()));
  CHECK(std::isinf(tensor({1e5}, {}, kFloat16).item<float>()));
}

TEST_CASE("CPU compute kernels on float16/bfloat16 compute in float32 and round once") {
  // ops/cpu/float32_compute.h; tests/test_autocast_model.cpp checks every wrapped op bit for bit.
  const Tensor h = ones({2, 2}, kFloat16), b = ones({2, 2}, kBFloat16);
  CHECK(add(h, h).dtype() == kFloat16);
  CHECK(add(h, h).to_vector<float>() == std::vector<float>(4, 2.0f));
  CHECK(mul(b, b).dtype() == kBFloat16);
  CHECK(std::isinf((h + 1e5).to_vector<float>()[0]));  // PyTorch: 100001 overflows float16 to inf
  CHECK(matmul(h, h).to_vector<float>() == std::vector<float>(4, 2.0f));
  CHECK(softmax(b, 1).to_vector<float>() == std::vector<float>(4, 0.5f));
  CHECK(h.exp().to_vector<float>()[0] == static_cast<float>(Half(std::exp(1.0f))));
  CHECK(cross_entropy(b, tensor(std::vector<int64_t>{0, 1})).dtype() == kBFloat16);  // as PyTorch outside autocast
  // Ops without a 16-bit CPU path still refuse them, naming the op and the dtype.
  CHECK_THROWS_CONTAINS(index_select(b, 0, tensor(std::vector<int64_t>{0})), "index_select: dtype bfloat16");
}

TEST_CASE("max/min(dim) backward on float16/bfloat16: the gradient lands at the float32 copy's indices") {
  // The CPU scatter once wrote past its buffer for 16-bit tensors (heap
  // corruption; ASan names it): every dim, keepdim or not, a non-contiguous input.
  for (const DType dt : {kFloat16, kBFloat16}) {
    for (const bool is_max : {true, false}) {
      for (const int64_t dim : {0, 1, 2, -1}) {
        for (const bool keepdim : {false, true}) {
          CAPTURE(dt); CAPTURE(is_max); CAPTURE(dim); CAPTURE(keepdim);
          const Tensor x16 = randn({4, 6, 5}, dt).transpose(0, 2).detach().requires_grad_(true);  // (5, 6, 4) strided
          const Tensor x32 = x16.detach().to(kFloat32).requires_grad_(true);
          auto pick = [&](const Tensor& x) { return is_max ? max(x, dim, keepdim) : min(x, dim, keepdim); };
          const auto r16 = pick(x16), r32 = pick(x32);
          CHECK(r16.indices.to_vector<int64_t>() == r32.indices.to_vector<int64_t>());
          const Tensor up = randn(r16.values.shape(), dt);
          sum(mul(r16.values, up)).backward();
          sum(mul(r32.values, up.to(kFloat32))).backward();
          CHECK(x16.grad().to(kFloat32).to_vector<float>() == x32.grad().to_vector<float>());  // moved, not computed
        }
      }
    }
  }
}

TEST_CASE("autograd through casts: ToCopy converts the gradient back") {
  Tensor x = tensor({0.5, -1.0, 3.0}).requires_grad_();
  Tensor y = x.to(kFloat16);
  CHECK(y.dtype() == kFloat16);
  CHECK(y.requires_grad());
  (y.to(kFloat32) * 3.0).sum().backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == kFloat32);
  CHECK(x.grad().to_vector<float>() == std::vector<float>{3.0f, 3.0f, 3.0f});
}

TEST_CASE("printing, as PyTorch's repr") {
  // Expected strings: repr() of the same tensors in PyTorch 2.15.
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  CHECK(tensor({1.0, 2.0}, {}, kFloat16).str() == "tensor([1., 2.], dtype=torch.float16)");
  CHECK(tensor({0.1, 2.5}, {}, kBFloat16).str() == "tensor([0.1001, 2.5000], dtype=torch.bfloat16)");
  CHECK(tensor({1e-5, 3.0, 65504.0}, {}, kFloat16).str() ==
        "tensor([1.0014e-05, 3.0000e+00, 6.5504e+04], dtype=torch.float16)");
  CHECK(tensor({nan, inf, -inf, 1.5}, {}, kFloat16).str() ==
        "tensor([   nan,    inf,   -inf, 1.5000], dtype=torch.float16)");
  CHECK(tensor({0.1, -0.3333, 1000.5}, {}, kFloat16).str() ==
        "tensor([ 9.9976e-02, -3.3325e-01,  1.0005e+03], dtype=torch.float16)");
  CHECK(tensor({1e30, -2.0}, {}, kBFloat16).str() == "tensor([ 1.0003e+30, -2.0000e+00], dtype=torch.bfloat16)");
  CHECK(zeros({2, 0}, kFloat16).str() == "tensor([], size=(2, 0), dtype=torch.float16)");
  CHECK(scalar_tensor(3.0, kBFloat16).str() == "tensor(3., dtype=torch.bfloat16)");
  CHECK(arange(6.0, kFloat16).reshape({2, 3}).str() ==
        "tensor([[0., 1., 2.],\n"
        "        [3., 4., 5.]], dtype=torch.float16)");
  CHECK(tensor({1.0, 2.0}, {}, TensorOptions(kFloat16).requires_grad()).str() ==
        "tensor([1., 2.], dtype=torch.float16, requires_grad=True)");
}

TEST_CASE("safetensors: F16 and BF16 save and load as themselves") {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("minidl_half_" + std::to_string(::getpid()) + ".safetensors")).string();
  const Tensor h = tensor({1.5, -2.0, 65504.0, 0.1, 6e-8, -0.0}, {2, 3}, kFloat16);
  const Tensor b = tensor({1.0, -0.5, 3e38, 1e-40}, {}, kBFloat16);
  const Tensor h_t = h.t();  // saved through a contiguous copy
  const Tensor nans = from_values(std::vector<uint16_t>{0x7C01, 0xFE00}, kFloat16);
  save_safetensors(path, {{"h", h}, {"b", b}, {"h_t", h_t}, {"nans", nans}, {"f32", ones({2})}});
  const SafetensorsFile f = load_safetensors(path);
  std::filesystem::remove(path);
  for (const auto& [name, t] : std::vector<std::pair<std::string, Tensor>>{{"h", h}, {"b", b}, {"h_t", h_t}, {"nans", nans}}) {
    INFO(name);
    const Tensor& got = f.at(name);
    CHECK(got.dtype() == t.dtype());
    CHECK(got.shape() == t.shape());
    CHECK(bits_of(got) == bits_of(t));
  }
  CHECK(f.at("h").to_vector<float>() == std::vector<float>{1.5f, -2.0f, 65504.0f, 0.0999755859375f, 0x1p-24f, -0.0f});
  CHECK(f.at("b").to_vector<float>()[2] == BFloat16(3e38f).operator float());
}
