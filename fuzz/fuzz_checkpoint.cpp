// Checkpoint state other than the model's tensors: what train_cifar10's
// resume feeds the library from checkpoint.json and optimizer_*.safetensors.
// The input's first byte picks the reader, the rest is its input:
//   0  an optimizer state file (safetensors: state.<i>.<name> tensors and the
//      "optimizer"/"param_groups" metadata) -> SGD / AdamW load_state_dict
//   1  the param_groups JSON alone            -> SGD load_state_dict
//   2  a scheduler state (checkpoint.json's "scheduler") -> LRScheduler::load_state_dict
//   3  a generator state (checkpoint.json's "generator_state") -> Generator::set_state
#include <nlohmann/json.hpp>

#include "fuzz/fuzz_util.h"
#include "minidl/minidl.h"

namespace {

using namespace minidl;

std::vector<Tensor> params() { return {zeros({2, 3}).requires_grad_(), zeros({3}).requires_grad_()}; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return minidl::fuzz::run(data, size, [](std::string_view bytes) {
    if (bytes.empty()) return;
    const std::string rest(bytes.substr(1));
    switch (static_cast<uint8_t>(bytes[0]) % 4) {
      case 0: {
        SafetensorsFile file = parse_safetensors(rest, "optimizer_fuzz.safetensors");
        optim::OptimizerStateDict state{std::move(file.tensors), std::move(file.metadata)};
        auto it = state.metadata.find("optimizer");
        if (it != state.metadata.end() && it->second == "AdamW") {
          optim::AdamW opt(params(), 1e-3);
          opt.load_state_dict(state);
        } else {
          optim::SGD opt(params(), 0.1, 0.9);
          opt.load_state_dict(state);
        }
        break;
      }
      case 1: {
        optim::SGD opt(params(), 0.1, 0.9);
        opt.load_state_dict({{}, {{"optimizer", "SGD"}, {"param_groups", rest}}});
        break;
      }
      case 2: {
        const nlohmann::json state = nlohmann::json::parse(rest, nullptr, /*allow_exceptions=*/false);
        if (state.is_discarded()) return;  // checkpoint.json itself is parsed by nlohmann::json
        optim::SGD opt(params(), 0.1, 0.9);
        optim::CosineAnnealingLR sched(opt, 10);
        sched.load_state_dict(state);
        sched.step();
        break;
      }
      case 3: {
        Generator g;
        g.set_state(rest);
        (void)g.state();
        break;
      }
    }
  });
}
