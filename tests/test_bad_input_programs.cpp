// The bundled programs, their checkpoints, the models and interpolate given
// what a new user gives them by mistake (an ASan/UBSan probe). Each case was a
// hang, undefined behaviour, a silent wrong result, a check that turned itself
// off or an error naming no flag; now each is refused with a message naming the
// flag, file or value.
// The whole-program cases run the programs built next to this test
// (build/examples/<name>); they are skipped when those are not built.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "examples/common/checkpoint.h"
#include "minidl/data/npy.h"
#include "minidl/minidl.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace minidl;

namespace {

// This process's folder under the system's temporary directory, removed at exit.
const fs::path& scratch_root() {
  struct Root {
    fs::path path = fs::temp_directory_path() / ("minidl_bad_programs_" + std::to_string(::getpid()));
    ~Root() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static const Root root;
  return root.path;
}

// A fresh folder in scratch_root().
fs::path scratch(const std::string& name) {
  const fs::path dir = scratch_root() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// build/examples/<program>, next to this test's build/tests/; empty when not built.
std::string program_path(const std::string& program) {
  const fs::path p = fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "examples" / program;
  return fs::exists(p) ? p.string() : std::string();
}

// Runs `program args` (at most 20 s): its exit code and stderr.
std::pair<int, std::string> run_program(const std::string& program, const std::string& args) {
  const std::string cmd = "OMP_NUM_THREADS=1 timeout 20 " + program + " " + args + " 2>&1 >/dev/null";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string err;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) err.append(buf, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), err};
}

// A whole-program command line and what it must give: exit code, text in stderr.
struct ProgramCase {
  const char* program;
  std::string args;
  int code;
  std::string want;
};

void check_programs(const std::vector<ProgramCase>& cases) {
  for (const ProgramCase& c : cases) {
    const std::string path = program_path(c.program);
    if (path.empty()) {
      MESSAGE("skipped: ", c.program, " is not built next to this test");
      continue;
    }
    CAPTURE(c.program);
    CAPTURE(c.args);
    const auto [code, err] = run_program(path, c.args);
    CAPTURE(err);
    CHECK(code == c.code);
    CHECK(err.find(c.want) != std::string::npos);
  }
}

// A checkpoint.json whose "epoch" is the JSON text `epoch`.
fs::path checkpoint_with_epoch(const std::string& epoch) {
  const fs::path dir = scratch("epoch");
  std::ofstream(dir / "checkpoint.json") << R"({"program": "train_cifar10", "epoch": )" << epoch
                                         << R"(, "model": "m.safetensors", "optimizer": "o.safetensors"})";
  return dir;
}

}  // namespace

TEST_CASE("interpolate refuses a nan, infinite or huge scale_factor as PyTorch does") {
  // Was: a float-to-int64 conversion out of range (undefined behaviour).
  const Tensor x = arange(3.0).reshape({1, 1, 3});
  for (const double s : {std::nan(""), HUGE_VAL, -HUGE_VAL, 1e30}) {
    CAPTURE(s);
    CHECK_THROWS_CONTAINS(interpolate(x, {.scale_factor = {s}}),
                          "value cannot be converted to type int64_t without overflow");
    CHECK_THROWS_CONTAINS(interpolate(x, {.scale_factor = {s}, .mode = "linear", .recompute_scale_factor = true}),
                          "value cannot be converted to type int64_t without overflow");
  }
  CHECK_THROWS_CONTAINS(interpolate(zeros({1, 1, 2, 2}), {.scale_factor = {2.0, std::nan("")}}),
                        "value cannot be converted to type int64_t without overflow");
}

TEST_CASE("interpolate refuses input without channels, keeps an empty batch, as PyTorch") {
  // Was: a (2, 0, 8, 8) result; PyTorch: "Non-empty 4D data tensor expected ...".
  CHECK_THROWS_CONTAINS(interpolate(zeros({2, 0, 4, 4}), {.scale_factor = {2.0}}),
                        "Non-empty 4D data tensor expected but got a tensor with sizes [2, 0, 4, 4]");
  CHECK_THROWS_CONTAINS(interpolate(zeros({0, 0, 4, 4, 4}), {.size = {2}, .mode = "trilinear"}),
                        "Non-empty 5D data tensor expected");
  CHECK(interpolate(zeros({0, 3, 4, 4}), {.scale_factor = {2.0}}).shape() == Shape{0, 3, 8, 8});
  std::ostringstream repr;
  repr << nn::Upsample();
  CHECK(repr.str() == "Upsample(size=None, mode='nearest')");  // was size=()
}

TEST_CASE("models refuse a width multiplier whose layers do not fit int64") {
  // Was: llround overflowed and every layer got 1 channel: --width 1e30 trained a tiny net, exit 0.
  for (const char* name : {"smallnet", "resnet20", "mlp"}) {
    CAPTURE(name);
    CHECK_THROWS_CONTAINS(models::create_model(name, models::ModelOptions().width(1e30)), "models: width multiplier");
  }
  CHECK(models::SmallNet(models::ModelOptions().width(1e-9))->convs[0]->weight.size(0) == 1);  // tiny: at least 1
  // Was: signed overflow of in_channels * input_size^2 (UBSan).
  CHECK_THROWS_CONTAINS(models::create_model("mlp", models::ModelOptions().input_size(int64_t{1} << 32)),
                        "overflows int64 for the mlp");
  // Was: "Calculated padded input size per channel: (2 x 10 x 10)" from deep inside a conv.
  models::UNet3d unet(1, 1, 4);
  CHECK_THROWS_CONTAINS(unet(zeros({1, 1, 0, 8, 8})), "UNet3d: expected every spatial size > 0");
}

TEST_CASE("read_checkpoint refuses a negative or huge epoch, naming the file") {
  // Was: 1e30 became -2^63 and train_cifar10 counted epochs up from there without end (a hang).
  for (const char* epoch : {"-5", "1e30", "18446744073709551615", "2.5", "\"x\""}) {
    CAPTURE(epoch);
    const fs::path dir = checkpoint_with_epoch(epoch);
    CHECK_THROWS_CONTAINS(examples::read_checkpoint(dir.string(), "train_cifar10"),
                          (dir / "checkpoint.json").string() + ": its \"epoch\" is ");
  }
  CHECK(examples::read_checkpoint(checkpoint_with_epoch("7").string(), "train_cifar10").epoch == 7);
}

TEST_CASE("check_output_paths refuses an unusable --checkpoint-dir or --save-final before training") {
  // Was: found when saving, after the first (checkpoint) or last (final model) epoch had trained.
  const fs::path dir = scratch("outputs");
  std::ofstream(dir / "file") << "x";
  CHECK_THROWS_CONTAINS(examples::check_output_paths((dir / "file").string()),
                        "--checkpoint-dir " + (dir / "file").string() + ": cannot create the folder");
  CHECK_THROWS_CONTAINS(examples::check_output_paths("", (dir / "no_such" / "m.safetensors").string()),
                        "the folder " + (dir / "no_such").string() + " does not exist");
  CHECK_THROWS_CONTAINS(examples::check_output_paths("", dir.string()),
                        "--save-final " + dir.string() + " is a folder");
  examples::check_output_paths((dir / "ckpt").string(), (dir / "m.safetensors").string());
  CHECK(fs::is_directory(dir / "ckpt"));
  examples::check_output_paths("", "m.safetensors");  // the working directory
}

TEST_CASE("programs refuse flags that turned their checks off or named no flag") {
  const fs::path dir = scratch("programs");
  std::ofstream(dir / "file") << "x";
  const std::string data = MINIDL_SHARED_DATA_DIR "/cifar10-subset";
  // Tiny, in the scratch folder: had a flag been accepted, the run stays small and writes nothing elsewhere.
  const std::string cifar = "--data " + data + " --limit-train 8 --limit-test 8 --epochs 1 --threads 1 --workers 0" +
                            " --width 0.125 --log-dir " + (dir / "logs").string() + " ";
  const std::string unet_dirs = "--data " + (dir / "unet").string() + " --log-dir " + (dir / "logs").string() + " ";
  const std::string unet =
      unet_dirs + "--epochs 1 --generate 1 --generate-val 1 --volume-size 8 --patch 8 --base-width 2 ";
  const std::string predict = "--checkpoint " + (dir / "none").string() + " --images " + (dir / "none").string() +
                              " --out " + (dir / "pred").string() + " ";
  const std::vector<ProgramCase> cases = {
      // exit 0 although nan / -0.5 can never be reached: the check was off
      {"train_cifar10", cifar + "--expect-test-acc nan", 2, "--expect-test-acc: expected a number >= 0, got nan"},
      {"train_cifar10", cifar + "--expect-train-acc -0.5", 2, "--expect-train-acc: expected a number >= 0, got -0.5"},
      {"train_unet3d", unet + "--expect-dice nan", 2, "--expect-dice: expected a number >= 0, got nan"},
      {"predict_unet3d", predict + "--expect-dice -1", 2, "--expect-dice"},
      // silently ignored, or an error that named no flag
      {"train_unet3d", unet + "--threads -2", 2, "--threads: expected a number >= 0, got -2"},
      {"predict_unet3d", predict + "--threads -2", 2, "--threads"},
      {"train_unet3d", unet + "--stop-after -1", 2, "--stop-after"},
      {"train_unet3d", unet + "--tb-slice -100", 2, "--tb-slice"},
      {"train_unet3d", unet_dirs + "--volume-size 0", 2, "--volume-size: expected a positive number, got 0"},
      {"train_unet3d", unet + "--gamma nan --milestones 1", 2, "--gamma"},
      {"train_unet3d", unet_dirs + "--generate -3", 2, "--generate: expected a number >= 0, got -3"},
      {"make_grain_dataset", "--out " + (dir / "g").string() + " --noise inf", 2, "--noise: expected a number >= 0"},
      {"make_grain_dataset", "--out " + (dir / "g").string() + " --grain-size nan", 2, "--grain-size"},
      // was: an epoch trained, then "filesystem error: ... Not a directory" or a lost final model
      {"train_cifar10", cifar + "--save-final " + (dir / "nodir" / "m.safetensors").string(), 1,
       "--save-final " + (dir / "nodir" / "m.safetensors").string() + ": the folder"},
  };
  check_programs(cases);
  CHECK_FALSE(fs::exists(dir / "logs" / "metrics.csv"));  // refused before any epoch
}

TEST_CASE("programs name the flag of an unusable output folder, a huge --roi and --amp fp16 off CUDA") {
  const fs::path dir = scratch("outputs_flags");
  std::ofstream(dir / "file") << "x";
  const std::string bad = (dir / "file" / "sub").string();  // under a file: cannot be created
  fs::create_directories(dir / "images");
  data::save_npy((dir / "images" / "v.npy").string(), zeros({4, 4, 4}));
  const std::string data = MINIDL_SHARED_DATA_DIR "/cifar10-subset";
  const std::string cifar = "--data " + data + " --limit-train 8 --limit-test 8 --epochs 1 --threads 1 --workers 0" +
                            " --width 0.125 --log-dir ";
  const std::string unet = "--data " + (dir / "unet").string() +
                           " --epochs 1 --generate 1 --generate-val 1 --volume-size 8 --patch 8 --base-width 2 --log-dir ";
  const std::string predict = "--checkpoint " + (dir / "none").string() + " --images " + (dir / "images").string() + " ";
  const std::string cannot = ": cannot create directory '" + bad + "': Not a directory";
  const std::vector<ProgramCase> cases = {
      // was: "filesystem error: cannot create directories: Not a directory [path]", or a message of the library
      {"train_cifar10", cifar + bad, 1, "--log-dir" + cannot},
      {"train_unet3d", unet + bad, 1, "--log-dir" + cannot},
      {"predict_unet3d", predict + "--out " + bad, 1, "--out" + cannot},
      {"make_grain_dataset", "--count 1 --size 4 --out " + bad, 1, "--out" + cannot},
      {"make_grain_dataset", "--count 1 --size 4 --out " + (dir / "g").string() + " --tensorboard " + bad, 1,
       "--tensorboard" + cannot},
      {"amp_bn_demo", "--out " + bad, 1, "--out" + cannot},
      {"bn_train_eval", "--out " + bad, 1, "--out" + cannot},
      // was: "pad: Storage size calculation overflowed" or an allocation of 4e15 bytes, after loading the model
      {"predict_unet3d", predict + "--out " + (dir / "pred").string() + " --roi 3000000", 2,
       "--roi: expected a window edge in [1, 2048] voxels, got 3000000"},
      {"predict_unet3d", predict + "--out " + (dir / "pred").string() + " --roi 8e9", 2, "--roi: expected a window edge"},
      // was: "--amp fp16 trains in float16 with loss scaling" from a program that does not train
      {"predict_unet3d", predict + "--out " + (dir / "pred").string() + " --amp fp16 --device cpu", 1,
       "--amp fp16 runs the forward passes in float16, which needs a CUDA device (this run is on cpu)"},
  };
  check_programs(cases);
  CHECK_FALSE(fs::exists(dir / "g" / "images"));  // refused before any volume
}
