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
    c.epoch = c.json.at("epoch").get<int64_t>();
  } catch (const json::exception& e) {
    MINIDL_FAIL(program, cannot, file.string(), ": ", e.what());
  }
  const std::string made_by = c.json.is_object() ? c.json.value("program", "") : "";
  MINIDL_CHECK(made_by.empty() || made_by == expected, program, cannot, file.string(), ": it is a checkpoint of ",
               made_by);
  c.dir = file.parent_path();
  return c;
}

void load_model_and_optimizer(const LoadedCheckpoint& c, nn::Module& model, optim::Optimizer& optimizer) {
  nn::load_state_dict_file(model, (c.dir / c.json.at("model").get<std::string>()).string());
  optimizer.load_state_dict(
      optim::OptimizerStateDict::load((c.dir / c.json.at("optimizer").get<std::string>()).string()));
}

}  // namespace minidl::examples
