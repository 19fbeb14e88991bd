// Everything in models/: ready-made networks (CIFAR ResNets, SmallNet, MLP, UNet2d/3d),
// the norm-layer factory and create_model by name.
#pragma once

#include "minidl/models/mlp.h"
#include "minidl/models/model_options.h"
#include "minidl/models/norm_factory.h"
#include "minidl/models/registry.h"
#include "minidl/models/resnet_cifar.h"
#include "minidl/models/small_net.h"
#include "minidl/models/unet.h"
