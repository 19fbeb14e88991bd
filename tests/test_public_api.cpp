// What a user gets from the umbrella header alone: every module the README
// lists compiles and runs through "minidl.h" (this file includes nothing else
// of minidl, on purpose).
#include <doctest/doctest.h>

#include "minidl/minidl.h"

using namespace minidl;

TEST_CASE("minidl.h gives every module the README lists") {
  manual_seed(0);
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(3, 8, 3).padding(1)), nn::BatchNorm2d(8), nn::ReLU(),
                     nn::GroupNorm(2, 8), nn::LeakyReLU(0.1), nn::InstanceNorm2d(8), nn::GELU(),
                     nn::MaxPool2d(2), nn::AvgPool2d(2), nn::AdaptiveAvgPool2d(1), nn::Flatten(),
                     nn::Dropout(0.1), nn::Linear(8, 6), nn::LayerNorm(Shape{6}), nn::Sigmoid(), nn::Tanh(),
                     nn::BatchNorm1d(6), nn::Identity());
  net->train();
  CHECK(net->forward(randn({4, 3, 8, 8})).shape() == Shape({4, 6}));
  nn::BatchNorm3d bn3(2);
  nn::InstanceNorm1d in1(3);
  nn::InstanceNorm3d in3(2);
  CHECK(bn3->forward(randn({2, 2, 3, 3, 3})).dim() == 5);
  CHECK(in1->forward(randn({2, 3, 5})).dim() == 3);
  CHECK(in3->forward(randn({2, 2, 3, 3, 3})).dim() == 5);
  nn::ModuleList list;
  list->push_back(nn::Linear(2, 2));
  CHECK(list->size() == 1);
}
