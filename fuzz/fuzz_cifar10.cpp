// A CIFAR-10 binary batch (label byte + 3072 pixel bytes per record).
#include "fuzz/fuzz_util.h"
#include "minidl/data/cifar10.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return minidl::fuzz::run(data, size, [](std::string_view bytes) {
    auto dataset = minidl::data::CIFAR10::from_bytes(bytes, "fuzz_batch.bin");
    if (dataset.size() > 0) (void)dataset.get(dataset.size() - 1);
  });
}
