// Everything in models/: ready-made networks (CIFAR ResNets, SmallNet, MLP),
// the norm-layer factory and create_model by name.
#pragma once

#include "models/mlp.h"
#include "models/model_options.h"
#include "models/norm_factory.h"
#include "models/registry.h"
#include "models/resnet_cifar.h"
#include "models/small_net.h"
