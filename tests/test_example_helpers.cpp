// Tests for the example programs' training helpers (examples/common): the
// learning-rate scaling rule, the per-epoch checkpoint files, --backend and
// where train_unet3d generates its synthetic data.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "examples/common/backend_choice.h"
#include "examples/common/checkpoint.h"
#include "examples/common/cli_checks.h"
#include "examples/common/lr_scaling.h"
#include "examples/common/mixed_precision.h"
#include "examples/common/segmentation_data.h"
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
  // Another program's checkpoint is named as such (train_unet3d given
  // train_cifar10's said "key 'base_width' not found", naming no file).
  examples::save_epoch_checkpoint(dir, 3, *model, opt, {{"program", "train_cifar10"}});
  CHECK(examples::read_checkpoint(dir.string(), "train_cifar10").epoch == 3);
  const std::string foreign =
      "train_unet3d: cannot resume from " + (dir / "checkpoint.json").string() + ": it is a checkpoint of train_cifar10";
  CHECK_THROWS_WITH_AS(examples::read_checkpoint(dir.string(), "train_unet3d"), doctest::Contains(foreign.c_str()),
                       minidl::Error);
  fs::remove_all(dir);
}

TEST_CASE("choose_backend: auto, gloo and nccl on posed machines") {
  using examples::BackendFacts;
  using examples::choose_backend;
  const Device gpu0(kCUDA, 0), gpu1(kCUDA, 1);
  const BackendFacts cpu_build{.nccl_built = false, .cuda_devices = 0, .local_world_size = 2};
  const BackendFacts two_gpus{.nccl_built = true, .cuda_devices = 2, .local_world_size = 2};
  const BackendFacts one_gpu{.nccl_built = true, .cuda_devices = 1, .local_world_size = 2};

  // auto: nccl only for a distributed run on CUDA devices, with NCCL, one GPU per process.
  CHECK(choose_backend("auto", true, kCPU, "auto", cpu_build).name == "gloo");
  CHECK(choose_backend("auto", true, kCPU, "auto", cpu_build).note == " (auto: cpu tensors)");
  CHECK(choose_backend("auto", true, kCPU, "cpu", two_gpus).name == "gloo");
  const BackendFacts rank1{.nccl_built = true, .cuda_devices = 2, .local_world_size = 2, .local_rank = 1};
  CHECK(choose_backend("auto", true, gpu1, "cuda", rank1).name == "nccl");
  CHECK(choose_backend("auto", true, gpu1, "cuda", rank1).note ==
        " (auto: a distributed run on CUDA devices, one GPU per process)");
  const BackendFacts alone{.nccl_built = true, .cuda_devices = 2, .local_world_size = 1, .local_rank = 0};
  CHECK(choose_backend("auto", true, gpu0, "cuda:0", alone).name == "nccl");
  CHECK(choose_backend("auto", true, gpu1, "cuda:1", alone).name == "gloo");  // NCCL would drive cuda:0
  CHECK(choose_backend("auto", true, gpu0, "cuda", BackendFacts{.nccl_built = false, .cuda_devices = 2,
                                                                .local_world_size = 2})
            .note.find("this build has no NCCL") != std::string::npos);
  const auto shared = choose_backend("auto", true, gpu0, "cuda", one_gpu);
  CHECK(shared.name == "gloo");
  CHECK(shared.note == " (auto: 2 processes on this node share 1 CUDA device, which NCCL refuses; CUDA tensors "
                       "staged through host memory)");
  CHECK(choose_backend("auto", true, gpu0, "cuda:0", two_gpus).name == "gloo");  // every rank on cuda:0
  CHECK(choose_backend("auto", false, kCPU, "auto", cpu_build).note == " (auto: unused: one process, no process group)");

  // gloo: always possible.
  CHECK(choose_backend("gloo", true, gpu0, "cuda", one_gpu).note == " (CUDA tensors staged through host memory)");
  CHECK(choose_backend("gloo", true, kCPU, "cpu", cpu_build).note.empty());

  // nccl: refused with the reason and the way out.
  CHECK_THROWS_CONTAINS(choose_backend("nccl", true, kCPU, "auto", cpu_build),
                        "--backend nccl: this build of minidl has no NCCL: configure with -DMINIDL_CUDA=ON");
  CHECK_THROWS_CONTAINS(choose_backend("nccl", false, kCPU, "auto", cpu_build), "use --backend gloo");
  CHECK_THROWS_CONTAINS(choose_backend("nccl", true, kCPU, "cpu", two_gpus),
                        "NCCL communicates CUDA tensors only, and this run trains on cpu; use --device cuda");
  CHECK_THROWS_CONTAINS(choose_backend("nccl", true, gpu0, "cuda", one_gpu),
                        "--backend nccl: 2 processes on this node share 1 CUDA device, and NCCL refuses two ranks on "
                        "one GPU ('Duplicate GPU detected'); use --backend gloo");
  CHECK_THROWS_CONTAINS(choose_backend("nccl", true, gpu0, "cuda:0", two_gpus),
                        "2 processes on this node all use cuda:0 (--device cuda:0)");
  CHECK(choose_backend("nccl", true, gpu1, "cuda", rank1).name == "nccl");
  CHECK_THROWS_CONTAINS(choose_backend("nccl", true, gpu1, "cuda:1", alone),
                        "--backend nccl: NCCL drives cuda:0 in this process (LOCAL_RANK 0), but --device cuda:1 puts "
                        "the model on cuda:1; use --device cuda");
  CHECK(choose_backend("nccl", false, gpu0, "cuda:0", two_gpus).note == " (unused: one process, no process group)");
  CHECK_THROWS_CONTAINS(choose_backend("mpi", true, kCPU, "auto", cpu_build),
                        "--backend: expected auto, gloo or nccl, got 'mpi'");
}

TEST_CASE("load_segmentation_data generates only into an absent or empty folder") {
  const fs::path dir = fs::temp_directory_path() / ("minidl_test_seg_data_" + std::to_string(getpid()));
  fs::remove_all(dir);
  examples::SegmentationDataOptions o;
  o.generate_train = 1;
  o.generate_val = 1;
  o.volume_size = 8;
  o.patch_size = {4, 4, 4};
  std::ostringstream log;
  // A user's folder in another layout (.npy files directly in it): refused,
  // nothing written next to them (was: grain volumes generated and trained on).
  fs::create_directories(dir / "mine");
  std::ofstream(dir / "mine" / "scan.npy") << "x";
  o.dir = (dir / "mine").string();
  CHECK_THROWS_WITH_AS(examples::load_segmentation_data(o, log),
                       doctest::Contains("holds scan.npy but neither train/images nor images/"), minidl::Error);
  CHECK_FALSE(fs::exists(dir / "mine" / "train"));
  // A file where the folder belongs.
  o.dir = (dir / "mine" / "scan.npy").string();
  CHECK_THROWS_WITH_AS(examples::load_segmentation_data(o, log), doctest::Contains("scan.npy is a file"),
                       minidl::Error);
  // Absent and empty folders get the synthetic set.
  for (const char* name : {"absent", "empty"}) {
    if (std::string(name) == "empty") fs::create_directories(dir / name);
    o.dir = (dir / name).string();
    const examples::SegmentationData d = examples::load_segmentation_data(o, log);
    CHECK(d.train->size() == 1);
    CHECK(d.val->size() == 1);
    CHECK(d.description.find("synthetic grain volumes generated in") == 0);
  }
  fs::remove_all(dir);
}

TEST_CASE("check_output_dir refuses what create_output_dir would, and creates nothing") {
  const fs::path dir = fs::temp_directory_path() / ("minidl_test_out_dir_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "file") << "x";
  examples::check_output_dir("--out", dir.string());                      // a folder already
  examples::check_output_dir("--out", (dir / "a" / "b" / "c").string());  // parents to create
  CHECK_FALSE(fs::exists(dir / "a"));
  for (const fs::path& bad : {dir / "file", dir / "file" / "sub" / "deeper"}) {
    const std::string want = "--out: cannot create directory '" + bad.string() + "': Not a directory";
    const doctest::Contains says(want.c_str());
    CHECK_THROWS_WITH_AS(examples::check_output_dir("--out", bad.string()), says, minidl::Error);
    CHECK_THROWS_WITH_AS(examples::create_output_dir("--out", bad.string()), says, minidl::Error);
  }
  CHECK_THROWS_WITH_AS(examples::check_output_dir("--out", ""), doctest::Contains("--out: expected a folder"),
                       minidl::Error);
  fs::remove_all(dir);
}

// The H100 run of 2026-11-27 found train_cifar10 --amp fp16 --device cuda
// failing at its first line: the GradScaler got "CUDA" (the type's display
// name) as its device. Without a GPU the scaler is built (and disabled with
// PyTorch's warning), so this runs everywhere.
TEST_CASE("MixedPrecision fp16 on a CUDA device builds its GradScaler; off CUDA it is refused") {
  for (const std::string spec : {"cuda", "cuda:1"}) {
    CAPTURE(spec);
    CHECK_NOTHROW(examples::MixedPrecision("fp16", Device(spec)));  // may warn "CUDA is not available.  Disabling."
  }
  CHECK_THROWS_WITH(examples::MixedPrecision("fp16", Device("cpu")),
                    doctest::Contains("--amp fp16 trains in float16 with loss scaling, which needs a CUDA device"));
  CHECK_THROWS_WITH(examples::MixedPrecision("fp32", Device("cpu")), doctest::Contains("--amp: unknown mode 'fp32'"));
}
