// Everything in nn/: Module and its holder, the layers, init, functional and
// state-dict files.
#pragma once

#include "nn/functional.h"
#include "nn/init.h"
#include "nn/module.h"
#include "nn/modules/activation.h"
#include "nn/modules/batch_norm.h"
#include "nn/modules/container.h"
#include "nn/modules/conv.h"
#include "nn/modules/dropout.h"
#include "nn/modules/flatten.h"
#include "nn/modules/group_norm.h"
#include "nn/modules/instance_norm.h"
#include "nn/modules/layer_norm.h"
#include "nn/modules/linear.h"
#include "nn/modules/pooling.h"
#include "nn/norm_utils.h"
#include "nn/serialize.h"
