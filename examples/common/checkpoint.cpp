// Epoch checkpoints committed by checkpoint.json. See examples/common/checkpoint.h.
#include "examples/common/checkpoint.h"

#include <fstream>

#include "minidl/core/atomic_file.h"
#include "minidl/core/check.h"
#include "minidl/nn/serialize.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace minidl::examples {

void save_epoch_checkpoint(const fs::path& dir, int64_t epoch, const nn::Module& model,
                           const optim::Optimizer& optimizer, json meta) {
  fs::create_directories(dir);
  const std::string tag = "epoch" + std::to_string(epoch);
  const std::string model_file = "model_" + tag + ".safetensors";
  const std::string optim_file = "optimizer_" + tag + ".safetensors";
  nn::save_state_dict(model, (dir / model_file).string());
  optimizer.state_dict().save((dir / optim_file).string());
  meta["epoch"] = epoch;
  meta["model"] = model_file;
  meta["optimizer"] = optim_file;
  const fs::path committed = dir / "checkpoint.json";
  std::string previous_model, previous_optim;
  if (fs::exists(committed)) {
    try {
      json old = json::parse(std::ifstream(committed));
      previous_model = old.value("model", "");
      previous_optim = old.value("optimizer", "");
    } catch (const std::exception&) {  // a damaged old file only means nothing to clean up
    }
  }
  // The commit point: until this rename the previous checkpoint.json (and its files) stands.
  write_file_atomically(committed.string(), {meta.dump(2)}, "checkpoint");
  // The previous epoch's files are no longer referenced.
  for (const std::string& f : {previous_model, previous_optim})
    if (!f.empty() && f != model_file && f != optim_file) fs::remove(dir / f);
}

LoadedCheckpoint read_checkpoint(const std::string& path, const std::string& program, const std::string& writer) {
  const std::string expected = writer.empty() ? program : writer;
  const std::string cannot = writer.empty() || writer == program ? ": cannot resume from " : ": cannot load ";
  const fs::path file = fs::is_directory(path) ? fs::path(path) / "checkpoint.json" : fs::path(path);
  MINIDL_CHECK(fs::exists(file), program, ": no checkpoint at ", file.string());
  MINIDL_CHECK(!fs::is_directory(file), program, cannot, file.string(), ": is a directory");
  LoadedCheckpoint c;
  c.file = file;
  try {
    c.json = json::parse(std::ifstream(file));
    // A negative or huge "epoch" (1e30 wrapped to -2^63: epochs counted up without end) is refused.
    const json& epoch = c.json.at("epoch");
    const bool ok = epoch.is_number_unsigned() ? epoch.get<uint64_t>() <= uint64_t{1} << 62
                                               : epoch.is_number_integer() && epoch.get<int64_t>() >= 0;
    MINIDL_CHECK(ok, program, cannot, file.string(), ": its \"epoch\" is ", epoch.dump(),
                 ", expected the number of epochs completed (a whole number >= 0)");
    c.epoch = epoch.get<int64_t>();
  } catch (const json::exception& e) {
    MINIDL_FAIL(program, cannot, file.string(), ": ", e.what());
  }
  const std::string made_by = c.json.is_object() ? c.json.value("program", "") : "";
  MINIDL_CHECK(made_by.empty() || made_by == expected, program, cannot, file.string(), ": it is a checkpoint of ",
               made_by);
  c.dir = file.parent_path();
  return c;
}

void check_output_paths(const std::string& checkpoint_dir, const std::string& save_final) {
  if (!checkpoint_dir.empty()) {
    std::error_code ec;
    fs::create_directories(checkpoint_dir, ec);
    MINIDL_CHECK(!ec && fs::is_directory(checkpoint_dir), "--checkpoint-dir ", checkpoint_dir,
                 ": cannot create the folder: ", ec ? ec.message() : "not a directory");
  }
  if (!save_final.empty()) {
    MINIDL_CHECK(!fs::is_directory(save_final), "--save-final ", save_final, " is a folder; expected a file name");
    const fs::path parent = fs::path(save_final).parent_path();
    MINIDL_CHECK(parent.empty() || fs::is_directory(parent), "--save-final ", save_final, ": the folder ",
                 parent.string(), " does not exist");
  }
}

void load_model_and_optimizer(const LoadedCheckpoint& c, nn::Module& model, optim::Optimizer& optimizer) {
  nn::load_state_dict_file(model, (c.dir / c.json.at("model").get<std::string>()).string());
  optimizer.load_state_dict(
      optim::OptimizerStateDict::load((c.dir / c.json.at("optimizer").get<std::string>()).string()));
}

}  // namespace minidl::examples
