// float32 error of conv2d's paths on the CIFAR ResNet-18 3x3 stride-1 shapes,
// per pass, against float64 (tests/conv2d_accuracy.h): the
// direct path (shifted planes from 16x16 maps up, im2col below; im2col also
// on the larger maps), Winograd F(2x2, 3x3) and F(4x4, 3x3). The table behind the bound of
// tests/test_conv2d_winograd.cpp.
//   build/bench/bench_conv_accuracy [--batch 8] [--seeds 2]
// prints one line per shape, pass and path: the max error in units of
// u * sum |w||x| (u = 2^-24), the RMS relative error and max |e| / max |y|.
#include <cstdio>
#include <string>

#include "bench/bench_util.h"
#include "tests/conv2d_accuracy.h"

using namespace minidl;

static int program(int argc, char** argv) {
  int64_t batch = 8;
  int seeds = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--batch") batch = examples::parse_int_arg(argv[i + 1], argv[i]);
    if (std::string(argv[i]) == "--seeds") seeds = static_cast<int>(examples::parse_int_arg(argv[i + 1], argv[i]));
  }
#if defined(__AVX512F__)
  const char* isa = "AVX-512";
#elif defined(__AVX2__)
  const char* isa = "AVX2";
#else
  const char* isa = "SSE";
#endif
  std::printf("float32 conv2d error against float64, batch %lld, %d seeds (worst), %s build\n",
              static_cast<long long>(batch), seeds, isa);
  std::printf("%-18s %-11s %-8s %10s %10s %10s\n", "shape", "pass", "path", "max/(uS)", "rms rel", "max rel");
  struct Shape {
    int64_t C, HW;
  };
  for (const Shape s : {Shape{64, 32}, Shape{128, 16}, Shape{256, 8}, Shape{512, 4}}) {
    Conv2dGeometry g;
    g.batch = batch, g.in_channels = g.out_channels = s.C, g.in_h = g.in_w = s.HW;
    g.kernel_h = g.kernel_w = 3, g.pad_h = g.pad_w = 1;
    conv2d_set_output_size(g);
    const Conv2dAlgo direct = s.HW >= 16 ? Conv2dAlgo::kShiftedPlanes : Conv2dAlgo::kIm2colGemm;
    for (Conv2dPass pass :
         {Conv2dPass::kForward, Conv2dPass::kInput, Conv2dPass::kWeight})
      for (auto [algo, name] : {std::pair{Conv2dAlgo::kIm2colGemm, "im2col"}, std::pair{direct, "direct"},
                                std::pair{Conv2dAlgo::kWinograd, "F(2x2)"}, std::pair{Conv2dAlgo::kWinograd4, "F(4x4)"}}) {
        if (std::string(name) == "im2col" && direct == Conv2dAlgo::kIm2colGemm) continue;  // printed as "direct"
        testing::Conv2dError worst;
        for (int seed = 0; seed < seeds; ++seed) {
          const testing::Conv2dError e = testing::conv2d_float32_error(g, algo, pass, 100 + seed);
          worst.max_u = std::max(worst.max_u, e.max_u);
          worst.rms_rel = std::max(worst.rms_rel, e.rms_rel);
          worst.max_rel = std::max(worst.max_rel, e.max_rel);
        }
        const std::string shape = std::to_string(s.C) + "->" + std::to_string(s.C) + " @" + std::to_string(s.HW) +
                                  "x" + std::to_string(s.HW);
        const char* pass_name = pass == Conv2dPass::kForward ? "forward"
                                : pass == Conv2dPass::kInput ? "grad_input"
                                                                      : "grad_weight";
        std::printf("%-18s %-11s %-8s %10.3f %10.3e %10.3e\n", shape.c_str(), pass_name,
                    name, worst.max_u, worst.rms_rel, worst.max_rel);
        std::fflush(stdout);
      }
  }
  return 0;
}

int main(int argc, char** argv) {
  return minidl::examples::run_main_with_usage("bench_conv_accuracy", "bench_conv_accuracy [--batch N] [--seeds N]",
                                               argc, argv, [&] { return program(argc, argv); });
}
