// Per-epoch checkpoints of the example programs: the model and the optimizer
// as safetensors files, committed by a checkpoint.json that names them.
//
//   examples::save_epoch_checkpoint(dir, epoch, model, opt, {{"scheduler", sched.state_dict()}, ...});
//   examples::LoadedCheckpoint c = examples::read_checkpoint(path);   // a folder or its checkpoint.json
//   examples::load_model_and_optimizer(c, model, opt);
//
// The epoch's model_epochN.safetensors and optimizer_epochN.safetensors are
// written first, then checkpoint.json (write_file_atomically: temp file,
// fsync, rename, directory fsync), then the previous
// epoch's files are removed: a crash at any point leaves a usable checkpoint.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "minidl/nn/module.h"
#include "minidl/optim/optimizer.h"

namespace minidl::examples {

// checkpoint.json = `meta` plus "epoch" (epochs completed), "model" and
// "optimizer" (file names in dir). Creates dir.
void save_epoch_checkpoint(const std::filesystem::path& dir, int64_t epoch, const nn::Module& model,
                           const optim::Optimizer& optimizer, nlohmann::json meta);

struct LoadedCheckpoint {
  nlohmann::json json;          // the whole checkpoint.json
  std::filesystem::path file;   // the checkpoint.json read
  std::filesystem::path dir;    // where its files are
  int64_t epoch = 0;            // epochs completed
};

// `path`: a checkpoint folder or its checkpoint.json. Throws minidl::Error
// (prefixed with `program`, naming the file) when there is none, it cannot be
// parsed, or its "program" entry (written by the programs into `meta`) names
// another program: train_unet3d given a train_cifar10 checkpoint.
// `writer`: the program whose checkpoints are accepted, when not `program`
// itself (predict_unet3d reads train_unet3d's: "cannot load" then, not
// "cannot resume from").
LoadedCheckpoint read_checkpoint(const std::string& path, const std::string& program, const std::string& writer = "");

// Before training: creates `checkpoint_dir` (--checkpoint-dir) and checks that
// `save_final` (--save-final) names a file in an existing folder; either may be
// empty. Throws minidl::Error naming the flag and the path (found only after the
// last epoch, such a mistake lost the whole run).
void check_output_paths(const std::string& checkpoint_dir, const std::string& save_final = "");

// Loads the model (strict) and the optimizer state the checkpoint names.
void load_model_and_optimizer(const LoadedCheckpoint& checkpoint, nn::Module& model, optim::Optimizer& optimizer);

}  // namespace minidl::examples
