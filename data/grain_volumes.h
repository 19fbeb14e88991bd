// A synthetic grain-structure data set for 3-D segmentation, so the volumetric
// examples run without a download. It imitates a polycrystal seen in X-ray
// tomography: space is cut into Voronoi-like grains, each with its own
// brightness; grain boundaries are dark, wavy (the grain geometry is warped by
// smooth random displacements) and are the foreground class of the label.
// Gaussian noise is added on top, so boundaries between grains of similar
// brightness are visible only through the dark boundary line.
//
// Construction, per volume:
//   seeds: one point per cell of a grid of pitch grain_size, uniform in its
//     cell (a jittered grid: grains of fairly even size);
//   p' = p + warp_amplitude * w(p), w a trilinear interpolation of N(0, 1)
//     vectors on a lattice of pitch warp_scale (this makes boundaries wavy);
//   d1, d2 = distances from p' to the nearest and second nearest seed;
//     gap = d2 - d1 (0 on a boundary, about twice the distance to it nearby);
//   label = gap < boundary_width;
//   image = I_grain * (1 - boundary_contrast * exp(-gap^2 / (2 (boundary_width / 2)^2)))
//           + N(0, noise_sigma^2), clamped to [0, 1] and stored as uint8 (x 255),
//   with I_grain ~ U[0.35, 0.85] per grain.
// With the defaults about 20% of voxels are boundary. Everything is drawn from
// a Generator seeded by (seed, volume index): volume i is the same whatever
// the count, and the same seed gives the same bytes.
#pragma once

#include <cstdint>
#include <string>

#include "minidl/core/tensor.h"

namespace minidl::data {

struct GrainVolumeOptions {
  double grain_size = 14.0;        // voxels: the seed grid's pitch (about the grain diameter)
  double boundary_width = 0.75;    // voxels of gap = d2 - d1 labelled boundary
  double boundary_contrast = 0.7;  // how much darker a boundary is than its grain
  double warp_amplitude = 1.5;     // voxels: how far boundaries wander
  double warp_scale = 8.0;         // voxels: the warp lattice's pitch
  double noise_sigma = 0.1;        // Gaussian noise, on the [0, 1] intensity scale
};

struct GrainVolume {
  Tensor image;  // uint8 (D, H, W)
  Tensor label;  // uint8 (D, H, W), 1 on boundaries
};

GrainVolume make_grain_volume(int64_t depth, int64_t height, int64_t width, uint64_t seed,
                              const GrainVolumeOptions& options = {});

struct GrainDatasetStats {
  int64_t count = 0;
  double foreground_fraction = 0.0;      // over all volumes
  double min_foreground_fraction = 1.0;  // per volume
  double max_foreground_fraction = 0.0;
};

// Writes dir/images/NNN.npy and dir/labels/NNN.npy (NNN = 000, 001, ...,
// more digits beyond 1000 volumes), each a size^3 uint8 volume; creates the
// folders. Volume i is make_grain_volume(size, size, size, grain_volume_seed(seed, i)).
GrainDatasetStats generate_grain_volumes(const std::string& dir, int64_t count, int64_t size, uint64_t seed,
                                         const GrainVolumeOptions& options = {});
uint64_t grain_volume_seed(uint64_t seed, int64_t index);
// "007.npy": the file name of volume `index` in a data set of `count` volumes.
std::string grain_volume_file_name(int64_t index, int64_t count);

}  // namespace minidl::data
