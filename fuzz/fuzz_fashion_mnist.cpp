// A Fashion-MNIST pair of IDX files, gzipped or not. The input is split in
// two: its first byte says where the labels file starts (as a fraction).
#include "fuzz/fuzz_util.h"
#include "minidl/data/fashion_mnist.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return minidl::fuzz::run(data, size, [](std::string_view bytes) {
    if (bytes.empty()) return;
    const size_t split = 1 + (bytes.size() - 1) * static_cast<uint8_t>(bytes[0]) / 256;
    auto dataset = minidl::data::FashionMNIST::from_bytes(bytes.substr(1, split - 1), "fuzz-images-idx3-ubyte.gz",
                                                          bytes.substr(split), "fuzz-labels-idx1-ubyte.gz");
    if (dataset.size() > 0) (void)dataset.get(0);
  });
}
