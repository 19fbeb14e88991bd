// examples/common/classifier_metrics.h.
#include "examples/common/classifier_metrics.h"

#include "examples/common/svg_plot.h"
#include "minidl/core/json_int.h"

namespace minidl::examples {

using nlohmann::json;

json to_json(const EpochMetrics& m) {
  auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  return {{"epoch", m.epoch}, {"lr", m.lr}, {"train_loss", num(m.train_loss)}, {"train_acc", num(m.train_acc)},
          {"test_loss", num(m.test_loss)}, {"test_acc", num(m.test_acc)},
          {"test_acc_train_mode", num(m.test_acc_train_mode)}, {"seconds", m.seconds},
          {"images_per_s", m.images_per_s}};
}

EpochMetrics metrics_from_json(const json& j) {
  auto num = [&](const char* k) { return j.at(k).is_null() ? NAN : j.at(k).get<double>(); };
  EpochMetrics m;
  m.epoch = json_int64(j.at("epoch"), "metrics: epoch");
  m.lr = num("lr");
  m.train_loss = num("train_loss");
  m.train_acc = num("train_acc");
  m.test_loss = num("test_loss");
  m.test_acc = num("test_acc");
  m.test_acc_train_mode = num("test_acc_train_mode");
  m.seconds = num("seconds");
  m.images_per_s = num("images_per_s");
  return m;
}

void write_curves(const std::filesystem::path& path, const std::vector<EpochMetrics>& history, const std::string& title) {
  using examples::Series;
  Series train_loss{"train", {}, {}}, test_loss{"test (eval mode)", {}, {}};
  Series train_acc{"train", {}, {}}, test_acc{"test (eval mode)", {}, {}}, test_acc_tm{"test (train mode)", {}, {}};
  for (const auto& m : history) {
    const double x = static_cast<double>(m.epoch);
    auto add = [&](Series& s, double y) {
      s.x.push_back(x);
      s.y.push_back(y);
    };
    add(train_loss, m.train_loss);
    add(test_loss, m.test_loss);
    add(train_acc, 100 * m.train_acc);
    add(test_acc, 100 * m.test_acc);
    add(test_acc_tm, 100 * m.test_acc_train_mode);
  }
  examples::write_svg_plot(path.string(),
                           {{"loss", "epoch", "cross-entropy", {train_loss, test_loss}, true},
                            {"accuracy", "epoch", "%", {train_acc, test_acc, test_acc_tm}, true}},
                           title);
}

}  // namespace minidl::examples
