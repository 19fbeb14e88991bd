// Tests for the example programs' training helpers (examples/common): the
// learning-rate scaling rule and the per-epoch checkpoint files.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "examples/common/checkpoint.h"
#include "examples/common/lr_scaling.h"
#include "minidl/minidl.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace minidl;

TEST_CASE("scale_lr: linear, sqrt and none against the total batch") {
  auto lin = examples::scale_lr(0.05, "linear", 4 * 128, 128);
  CHECK(lin.factor == doctest::Approx(4.0));
  CHECK(lin.lr == doctest::Approx(0.2));
  auto sq = examples::scale_lr(0.05, "sqrt", 4 * 128, 128);
  CHECK(sq.factor == doctest::Approx(2.0));
  CHECK(sq.lr == doctest::Approx(0.1));
  auto down = examples::scale_lr(0.1, "linear", 32, 128);  // smaller than the reference: lr goes down
  CHECK(down.lr == doctest::Approx(0.025));
  auto none = examples::scale_lr(0.05, "none", 512, 128);
  CHECK(none.lr == 0.05);
  CHECK(none.factor == 1.0);
  CHECK(lin.describe() == "lr 0.05 x 4 (linear: total batch 512 / reference 128) = 0.2");
  CHECK(none.describe().find("not scaled") != std::string::npos);
  CHECK_THROWS_WITH_AS(examples::scale_lr(0.05, "cubic", 128, 128),
                       doctest::Contains("unknown mode 'cubic'"), minidl::Error);
  CHECK_THROWS_WITH_AS(examples::scale_lr(0.05, "linear", 128, 0), doctest::Contains("reference batch size > 0"),
                       minidl::Error);
}

TEST_CASE("save_epoch_checkpoint commits with checkpoint.json and drops the previous epoch's files") {
  const fs::path dir = fs::temp_directory_path() / ("minidl_test_example_helpers_" + std::to_string(getpid()));
  fs::remove_all(dir);
  manual_seed(3);
  nn::Linear model(3, 2);
  optim::Adam opt(model->parameters(), 1e-2);
  Tensor x = randn({4, 3});
  model(x).sum().backward();
  opt.step();
  examples::save_epoch_checkpoint(dir, 1, *model, opt, {{"note", "first"}});
  CHECK(fs::exists(dir / "model_epoch1.safetensors"));
  opt.step();
  examples::save_epoch_checkpoint(dir, 2, *model, opt, {{"note", "second"}});
  CHECK_FALSE(fs::exists(dir / "model_epoch1.safetensors"));
  CHECK_FALSE(fs::exists(dir / "optimizer_epoch1.safetensors"));
  CHECK(fs::exists(dir / "optimizer_epoch2.safetensors"));

  const examples::LoadedCheckpoint c = examples::read_checkpoint(dir.string(), "test");
  CHECK(c.epoch == 2);
  CHECK(c.json.at("note") == "second");
  nn::Linear other(3, 2);
  optim::Adam other_opt(other->parameters(), 1e-2);
  examples::load_model_and_optimizer(c, *other, other_opt);
  CHECK(other->weight.to_vector<float>() == model->weight.to_vector<float>());
  // The restored Adam state continues exactly as the original.
  opt.zero_grad();
  model(x).sum().backward();
  other(x).sum().backward();
  opt.step();
  other_opt.step();
  CHECK(other->weight.to_vector<float>() == model->weight.to_vector<float>());
  CHECK_THROWS_WITH_AS(examples::read_checkpoint((dir / "nothing").string(), "prog"),
                       doctest::Contains("prog: no checkpoint at"), minidl::Error);
  fs::remove_all(dir);
}
