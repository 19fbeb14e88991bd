// The grain-structure generator (see grain_volumes.h for the model). The
// nearest-seed search looks at the 3 x 3 x 3 grid cells around a point, which
// is what makes a 64^3 volume take milliseconds, not seconds.
#include "minidl/data/grain_volumes.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <new>
#include <vector>

#include "minidl/core/check.h"
#include "minidl/core/generator.h"
#include "minidl/data/npy.h"

namespace minidl::data {

namespace {

// Smooth random displacement field: N(0, 1) vectors (clamped to +-3, which
// bounds how far a point can move) on a lattice, interpolated trilinearly.
class WarpField {
 public:
  WarpField(int64_t d, int64_t h, int64_t w, double pitch, Generator& gen)
      : pitch_(pitch), nz_(static_cast<int64_t>(d / pitch) + 2), ny_(static_cast<int64_t>(h / pitch) + 2),
        nx_(static_cast<int64_t>(w / pitch) + 2), v_(static_cast<size_t>(nz_ * ny_ * nx_ * 3)) {
    for (double& x : v_) x = std::clamp(gen.normal(), -3.0, 3.0);
  }
  // Displacement at (z, y, x), in units of the amplitude.
  void at(double z, double y, double x, double out[3]) const {
    const double fz = z / pitch_, fy = y / pitch_, fx = x / pitch_;
    const int64_t iz = std::min<int64_t>(static_cast<int64_t>(fz), nz_ - 2);
    const int64_t iy = std::min<int64_t>(static_cast<int64_t>(fy), ny_ - 2);
    const int64_t ix = std::min<int64_t>(static_cast<int64_t>(fx), nx_ - 2);
    const double tz = fz - iz, ty = fy - iy, tx = fx - ix;
    out[0] = out[1] = out[2] = 0.0;
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b)
        for (int c = 0; c < 2; ++c) {
          const double wgt = (a ? tz : 1 - tz) * (b ? ty : 1 - ty) * (c ? tx : 1 - tx);
          const double* v = &v_[static_cast<size_t>((((iz + a) * ny_ + iy + b) * nx_ + ix + c) * 3)];
          for (int k = 0; k < 3; ++k) out[k] += wgt * v[k];
        }
  }

 private:
  double pitch_;
  int64_t nz_, ny_, nx_;
  std::vector<double> v_;
};

struct Seeds {
  int64_t lo;           // index of the first cell along each axis (negative: margin)
  int64_t nz, ny, nx;   // cells per axis
  std::vector<double> pos;        // (z, y, x) per cell
  std::vector<double> intensity;  // per cell (= per grain)
};

Seeds make_seeds(int64_t d, int64_t h, int64_t w, double g, double margin, Generator& gen) {
  Seeds s;
  s.lo = static_cast<int64_t>(std::floor(-margin / g)) - 1;
  auto count = [&](int64_t n) { return static_cast<int64_t>(std::floor((n + margin) / g)) + 2 - s.lo; };
  s.nz = count(d);
  s.ny = count(h);
  s.nx = count(w);
  const size_t cells = static_cast<size_t>(s.nz * s.ny * s.nx);
  s.pos.resize(cells * 3);
  s.intensity.resize(cells);
  for (int64_t cz = 0; cz < s.nz; ++cz)
    for (int64_t cy = 0; cy < s.ny; ++cy)
      for (int64_t cx = 0; cx < s.nx; ++cx) {
        const size_t i = static_cast<size_t>((cz * s.ny + cy) * s.nx + cx);
        s.pos[3 * i + 0] = (static_cast<double>(cz + s.lo) + gen.uniform()) * g;
        s.pos[3 * i + 1] = (static_cast<double>(cy + s.lo) + gen.uniform()) * g;
        s.pos[3 * i + 2] = (static_cast<double>(cx + s.lo) + gen.uniform()) * g;
        s.intensity[i] = 0.35 + 0.5 * gen.uniform();
      }
  return s;
}

}  // namespace

uint64_t grain_volume_seed(uint64_t seed, int64_t index) {
  // splitmix64 of (seed, index): nearby seeds give unrelated volumes.
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index) + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::string grain_volume_file_name(int64_t index, int64_t count) {
  const size_t digits = std::max<size_t>(3, std::to_string(std::max<int64_t>(count - 1, 0)).size());
  std::string n = std::to_string(index);
  return std::string(digits > n.size() ? digits - n.size() : 0, '0') + n + ".npy";
}

// A function-try-block: the seed grid and the warp field are std::vectors,
// and a size of 100000 must give an error naming it, not std::bad_alloc.
GrainVolume make_grain_volume(int64_t depth, int64_t height, int64_t width, uint64_t seed,
                              const GrainVolumeOptions& o) try {
  MINIDL_CHECK(depth > 0 && height > 0 && width > 0, "make_grain_volume: expected positive sizes, got (", depth,
               ", ", height, ", ", width, ")");
  MINIDL_CHECK(o.grain_size >= 2.0, "make_grain_volume: grain_size must be >= 2 voxels, got ", o.grain_size);
  MINIDL_CHECK(o.warp_scale > 0.0 && o.boundary_width > 0.0 && o.warp_amplitude >= 0.0 && o.noise_sigma >= 0.0,
               "make_grain_volume: warp_scale and boundary_width must be > 0, warp_amplitude and noise_sigma >= 0");
  Generator gen(seed);
  const double g = o.grain_size;
  const double margin = 3.0 * o.warp_amplitude;  // the warp field is clamped to +-3
  const Seeds seeds = make_seeds(depth, height, width, g, margin, gen);
  const WarpField warp(depth, height, width, o.warp_scale, gen);

  GrainVolume out{empty({depth, height, width}, kUInt8), empty({depth, height, width}, kUInt8)};
  uint8_t* img = out.image.data_ptr<uint8_t>();
  uint8_t* lab = out.label.data_ptr<uint8_t>();
  const double sb = o.boundary_width / 2;  // the dark line's Gaussian profile width
  int64_t i = 0;
  for (int64_t z = 0; z < depth; ++z)
    for (int64_t y = 0; y < height; ++y)
      for (int64_t x = 0; x < width; ++x, ++i) {
        double p[3] = {z + 0.5, y + 0.5, x + 0.5}, disp[3];
        warp.at(p[0], p[1], p[2], disp);
        for (int k = 0; k < 3; ++k) p[k] += o.warp_amplitude * disp[k];
        const int64_t cz = static_cast<int64_t>(std::floor(p[0] / g)) - seeds.lo;
        const int64_t cy = static_cast<int64_t>(std::floor(p[1] / g)) - seeds.lo;
        const int64_t cx = static_cast<int64_t>(std::floor(p[2] / g)) - seeds.lo;
        double d1 = 1e300, d2 = 1e300;
        size_t nearest = 0;
        for (int64_t a = cz - 1; a <= cz + 1; ++a)
          for (int64_t b = cy - 1; b <= cy + 1; ++b)
            for (int64_t c = cx - 1; c <= cx + 1; ++c) {
              const size_t s = static_cast<size_t>((a * seeds.ny + b) * seeds.nx + c);
              const double dz = p[0] - seeds.pos[3 * s], dy = p[1] - seeds.pos[3 * s + 1],
                           dx = p[2] - seeds.pos[3 * s + 2];
              const double dd = dz * dz + dy * dy + dx * dx;
              if (dd < d1) {
                d2 = d1;
                d1 = dd;
                nearest = s;
              } else if (dd < d2) {
                d2 = dd;
              }
            }
        const double gap = std::sqrt(d2) - std::sqrt(d1);
        lab[i] = gap < o.boundary_width ? 1 : 0;
        const double dark = o.boundary_contrast * std::exp(-gap * gap / (2 * sb * sb));
        const double v = seeds.intensity[nearest] * (1.0 - dark) + o.noise_sigma * gen.normal();
        img[i] = static_cast<uint8_t>(std::lround(std::clamp(v, 0.0, 1.0) * 255.0));
      }
  return out;
} catch (const std::bad_alloc&) {
  MINIDL_FAIL("make_grain_volume: out of memory for a volume of (", depth, ", ", height, ", ", width,
              ") voxels; use a smaller size");
}

GrainDatasetStats generate_grain_volumes(const std::string& dir, int64_t count, int64_t size, uint64_t seed,
                                         const GrainVolumeOptions& options) {
  MINIDL_CHECK(count > 0, "generate_grain_volumes: count must be positive, got ", count);
  MINIDL_CHECK(size > 0, "generate_grain_volumes: size must be positive, got ", size);
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const char* sub : {"images", "labels"}) {
    fs::create_directories(fs::path(dir) / sub, ec);
    MINIDL_CHECK(!ec, "generate_grain_volumes: cannot create ", (fs::path(dir) / sub).string(), ": ", ec.message());
  }
  GrainDatasetStats stats;
  stats.count = count;
  int64_t foreground = 0;
  for (int64_t i = 0; i < count; ++i) {
    const GrainVolume v = make_grain_volume(size, size, size, grain_volume_seed(seed, i), options);
    const std::string name = grain_volume_file_name(i, count);
    save_npy((fs::path(dir) / "images" / name).string(), v.image);
    save_npy((fs::path(dir) / "labels" / name).string(), v.label);
    const uint8_t* l = v.label.data_ptr<uint8_t>();
    int64_t fg = 0;
    for (int64_t k = 0; k < v.label.numel(); ++k) fg += l[k];
    foreground += fg;
    const double frac = static_cast<double>(fg) / static_cast<double>(v.label.numel());
    stats.min_foreground_fraction = std::min(stats.min_foreground_fraction, frac);
    stats.max_foreground_fraction = std::max(stats.max_foreground_fraction, frac);
  }
  stats.foreground_fraction = static_cast<double>(foreground) / static_cast<double>(count * size * size * size);
  return stats;
}

}  // namespace minidl::data
