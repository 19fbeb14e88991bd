// Everything in nn/: Module and its holder, the layers, init, functional and
// state-dict files.
#pragma once

#include "minidl/nn/functional.h"
#include "minidl/nn/init.h"
#include "minidl/nn/metrics.h"
#include "minidl/nn/module.h"
#include "minidl/nn/modules/activation.h"
#include "minidl/nn/modules/batch_norm.h"
#include "minidl/nn/modules/container.h"
#include "minidl/nn/modules/conv.h"
#include "minidl/nn/modules/dropout.h"
#include "minidl/nn/modules/flatten.h"
#include "minidl/nn/modules/group_norm.h"
#include "minidl/nn/modules/instance_norm.h"
#include "minidl/nn/modules/layer_norm.h"
#include "minidl/nn/modules/linear.h"
#include "minidl/nn/modules/loss.h"
#include "minidl/nn/modules/pooling.h"
#include "minidl/nn/modules/upsampling.h"
#include "minidl/nn/norm_utils.h"
#include "minidl/nn/serialize.h"
