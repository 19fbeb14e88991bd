// nn::convert_sync_batch_norm and dist::batch_norm_report_across_ranks, in real
// processes over Gloo on loopback (tests/dist_test_util.h).
//
// convert_sync_batch_norm: every SyncBatchNorm shares the weight, bias,
// running statistics and num_batches_tracked tensors of the BatchNorm it
// replaces and keeps its mode, eval lock and frozen gamma; other layers are
// left alone, a shared BN becomes one shared SyncBN, the state_dict keeps its
// keys and tensors, the eval output is unchanged, converting twice changes
// nothing and a BN root is replaced (a hand-built model, then the model zoo's
// resnet20 and smallnet). batch_norm_report_across_ranks: BatchNorm's running
// statistics drift apart across 3 ranks fed different data (the largest
// difference checked against an all_gather by hand) while SyncBatchNorm's
// agree, and models that differ across ranks are an error on every rank.
// SyncBatchNorm itself: tests/test_sync_batch_norm.cpp.
//
// All tensor work happens inside the ranks (the parent must not start OpenMP
// before forking), one OpenMP thread per rank.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "minidl/dist/batch_norm_report.h"
#include "minidl/dist/sync_batch_norm.h"
#include "minidl/nn/modules/instance_norm.h"
#include "tests/dist_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::dist_require_close;
using minidl::testing::run_ranks;

TEST_CASE("convert_sync_batch_norm shares the tensors and keeps modes") {
  const std::string failures = run_ranks(
      1,
      [](int, int) {
        set_num_threads(1);
        auto bn_shared = nn::BatchNorm2d(4);
        nn::Sequential seq(nn::Conv2d(nn::Conv2dOptions(3, 4, 3).padding(1)), nn::BatchNorm2d(4), nn::ReLU(),
                           nn::InstanceNorm2d(nn::BatchNormOptions(4).affine(true)), bn_shared, bn_shared,
                           nn::BatchNorm2d(nn::BatchNormOptions(4).momentum(std::nullopt).affine(false)),
                           nn::BatchNorm2d(4));
        std::shared_ptr<nn::Module> model = seq.ptr();
        auto old = [&](int i) { return std::dynamic_pointer_cast<nn::BatchNormImplBase>(model->child(std::to_string(i))); };
        const auto bn1 = old(1), bn4 = old(4), bn6 = old(6), bn7 = old(7);
        const auto instance = model->child("3");
        bn1->weight.requires_grad_(false);  // a frozen gamma stays frozen
        model->train();
        bn6->eval();
        bn7->set_eval_locked(true);  // nn::freeze_batch_norm's lock
        {
          NoGradGuard no_grad;
          for (auto& [name, t] : model->named_buffers())
            if (name.find("running_mean") != std::string::npos) t.copy_(randn(t.shape()));
        }
        const auto keys_before = model->state_dict();
        manual_seed(31);
        const Tensor x = randn({2, 3, 5, 5});
        model->eval();
        const Tensor y_before = model->forward(x);
        model->train();
        bn6->eval();

        auto converted = nn::convert_sync_batch_norm(model);
        DIST_REQUIRE(converted.get() == model.get());
        auto sync = [&](int i) { return std::dynamic_pointer_cast<nn::SyncBatchNormImpl>(model->child(std::to_string(i))); };
        for (int i : {1, 4, 5, 6, 7}) DIST_REQUIRE(sync(i) != nullptr, << "child " << i);
        DIST_REQUIRE(model->child("3") == instance);  // InstanceNorm left alone
        DIST_REQUIRE(sync(4) == sync(5));             // a shared BN becomes one shared SyncBN
        const std::vector<std::pair<int, std::shared_ptr<nn::BatchNormImplBase>>> pairs{
            {1, bn1}, {4, bn4}, {6, bn6}, {7, bn7}};
        for (const auto& [i, bn] : pairs) {
          auto s = sync(i);
          const auto same = [](const Tensor& a, const Tensor& b) {
            return a.defined() ? (b.defined() && a.is_same(b) && a.raw_data() == b.raw_data()) : !b.defined();
          };
          DIST_REQUIRE(same(s->weight, bn->weight) && same(s->bias, bn->bias), << "child " << i);
          DIST_REQUIRE(same(s->running_mean, bn->running_mean) && same(s->running_var, bn->running_var),
                       << "child " << i);
          DIST_REQUIRE(same(s->num_batches_tracked, bn->num_batches_tracked), << "child " << i);
          DIST_REQUIRE(s->is_training() == bn->is_training(), << "child " << i);
          DIST_REQUIRE(s->is_eval_locked() == bn->is_eval_locked(), << "child " << i);
          DIST_REQUIRE(s->process_group == nullptr);
        }
        DIST_REQUIRE(sync(1)->is_training() && !sync(6)->is_training() && sync(7)->is_eval_locked());
        DIST_REQUIRE(!sync(1)->weight.requires_grad() && sync(1)->bias.requires_grad());
        std::ostringstream os;
        os << *sync(6);
        DIST_REQUIRE(os.str() ==
                         "SyncBatchNorm(4, eps=1e-05, momentum=None, affine=False,"
                         " bias=False, track_running_stats=True)",
                     << os.str());
        // state_dict: the same keys in the same order, the same tensors.
        const auto keys_after = model->state_dict();
        DIST_REQUIRE(keys_after.size() == keys_before.size());
        for (size_t i = 0; i < keys_after.size(); ++i) {
          DIST_REQUIRE(keys_after[i].first == keys_before[i].first, << keys_after[i].first);
          DIST_REQUIRE(keys_after[i].second.raw_data() == keys_before[i].second.raw_data(), << keys_after[i].first);
        }
        // Same function (no process group: plain BatchNorm).
        model->eval();
        dist_require_close(model->forward(x), y_before, 0, 0, "eval output after converting");
        // Converting again changes nothing; a BN root is replaced by a new SyncBN.
        auto again = nn::convert_sync_batch_norm(model);
        DIST_REQUIRE(again == model && std::dynamic_pointer_cast<nn::SyncBatchNormImpl>(again->child("1")) == sync(1));
        auto root_bn = nn::BatchNorm1d(5);
        root_bn->eval();
        auto root = nn::convert_sync_batch_norm(root_bn.ptr());
        auto root_sync = std::dynamic_pointer_cast<nn::SyncBatchNormImpl>(root);
        DIST_REQUIRE(root_sync != nullptr && root_sync->weight.is_same(root_bn->weight) && !root_sync->is_training());
        DIST_REQUIRE_THROWS_CONTAINS(nn::convert_sync_batch_norm(nullptr), "nullptr");
      },
      std::chrono::seconds(60), false);
  CHECK_MESSAGE(failures.empty(), failures);
}

TEST_CASE("convert_sync_batch_norm on a model zoo model") {
  const std::string failures = run_ranks(
      1,
      [](int, int) {
        set_num_threads(1);
        manual_seed(41);
        auto model = models::create_model("resnet20", models::ModelOptions().width(0.25));
        int bns = 0;
        for (const auto& m : model->modules()) bns += nn::is_batch_norm(*m);
        DIST_REQUIRE(bns > 0);
        const auto keys_before = model->state_dict();
        const Tensor x = randn({2, 3, 32, 32});
        model->eval();
        const Tensor y_before = model->forward(x);
        model = nn::convert_sync_batch_norm(model);
        int syncs = 0, plain = 0;
        for (const auto& m : model->modules()) {
          syncs += std::dynamic_pointer_cast<nn::SyncBatchNormImpl>(m) != nullptr;
          plain += nn::is_batch_norm(*m) && !std::dynamic_pointer_cast<nn::SyncBatchNormImpl>(m);
        }
        DIST_REQUIRE(syncs == bns && plain == 0, << syncs << " SyncBN, " << plain << " BN left of " << bns);
        const auto keys_after = model->state_dict();
        DIST_REQUIRE(keys_after.size() == keys_before.size());
        for (size_t i = 0; i < keys_after.size(); ++i) DIST_REQUIRE(keys_after[i].first == keys_before[i].first);
        dist_require_close(model->forward(x), y_before, 0, 0, "resnet20 after converting, eval");

        auto net = nn::convert_sync_batch_norm(
            models::create_model("smallnet", models::ModelOptions().norm("batchnorm").width(0.25)));
        int in_net = 0;
        for (const auto& m : net->modules()) in_net += std::dynamic_pointer_cast<nn::SyncBatchNormImpl>(m) != nullptr;
        DIST_REQUIRE(in_net > 0);
        net->train();
        DIST_REQUIRE(net->forward(randn({2, 3, 32, 32})).size(0) == 2);
      },
      std::chrono::seconds(60), false);
  CHECK_MESSAGE(failures.empty(), failures);
}

TEST_CASE("batch_norm_report_across_ranks: BatchNorm drifts apart across ranks, SyncBatchNorm does not") {
  const std::string failures = run_ranks(3, [](int rank, int world) {
    set_num_threads(1);
    auto make_model = [] {
      manual_seed(51);  // the same initial weights on every rank
      return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(3, 6, 3).padding(1)), nn::BatchNorm2d(6), nn::ReLU(),
                            nn::Conv2d(nn::Conv2dOptions(6, 5, 3)), nn::BatchNorm2d(5),
                            nn::BatchNorm2d(nn::BatchNormOptions(5).track_running_stats(false)));
    };
    auto train = [&](const std::shared_ptr<nn::Module>& model) {
      manual_seed(60 + static_cast<uint64_t>(rank));  // different data on each rank
      for (int step = 0; step < 3; ++step) model->forward(randn({4, 3, 6, 6}) * (1.0 + rank) + 0.5 * rank);
    };

    std::shared_ptr<nn::Module> plain = make_model().ptr();
    train(plain);
    const dist::CrossRankBatchNormReport r1 = dist::batch_norm_report_across_ranks(*plain);
    DIST_REQUIRE(r1.world_size == world && r1.layers.size() == 3);
    DIST_REQUIRE(r1.layers[0].name == "1" && r1.layers[0].type == "BatchNorm2d" && r1.layers[0].num_features == 6);
    DIST_REQUIRE(!r1.layers[2].has_running_stats);
    // Independently: the largest difference of running_mean in layer "1", by hand.
    const Tensor rm = std::dynamic_pointer_cast<nn::BatchNorm2dImpl>(plain->child("1"))->running_mean;
    std::vector<Tensor> all{empty({6}), empty({6}), empty({6})};
    dist::all_gather(all, rm);
    double expected = 0.0;
    for (int a = 0; a < world; ++a)
      for (int b = 0; b < world; ++b)
        expected = std::max(expected, (all[a].to(kFloat64) - all[b].to(kFloat64)).abs().max().item<double>());
    DIST_REQUIRE(expected > 0.0);
    DIST_REQUIRE(std::abs(r1.layers[0].running_mean_diff - expected) <= 1e-12 * expected,
                 << r1.layers[0].running_mean_diff << " vs " << expected);
    DIST_REQUIRE(r1.layers[1].running_mean_diff > 0 && r1.layers[1].running_var_diff > 0);
    DIST_REQUIRE(r1.max_running_mean_diff() >= r1.layers[1].running_mean_diff);
    DIST_REQUIRE(*r1.layers[0].min_batches_tracked == 3 && *r1.layers[0].max_batches_tracked == 3);

    std::shared_ptr<nn::Module> synced = nn::convert_sync_batch_norm(make_model().ptr());
    train(synced);
    const dist::CrossRankBatchNormReport r2 = dist::batch_norm_report_across_ranks(*synced);
    DIST_REQUIRE(r2.layers.size() == 3 && r2.layers[0].type == "SyncBatchNorm");
    DIST_REQUIRE(r2.max_running_mean_diff() <= 1e-6 && r2.max_running_var_diff() <= 1e-6,
                 << r2.max_running_mean_diff() << ", " << r2.max_running_var_diff());
    const std::string table = dist::to_string(r2);
    DIST_REQUIRE(table.find("across 3 rank(s): 3 layer(s)") != std::string::npos, << table);
    DIST_REQUIRE(table.find("SyncBatchNorm") != std::string::npos, << table);
    DIST_REQUIRE(table.find("no running stats") != std::string::npos, << table);
    DIST_REQUIRE(dist::to_string(r1).find("differ") != std::string::npos, << dist::to_string(r1));
    if (rank == 0) std::printf("%s%s", dist::to_string(r1).c_str(), table.c_str());

    // Different models on different ranks: every rank is told, nobody hangs.
    std::shared_ptr<nn::Module> odd = rank == 1 ? make_model().ptr() : nn::Sequential(nn::BatchNorm2d(6)).ptr();
    DIST_REQUIRE_THROWS_CONTAINS(dist::batch_norm_report_across_ranks(*odd), "the ranks' models differ");
  });
  CHECK_MESSAGE(failures.empty(), failures);
}
