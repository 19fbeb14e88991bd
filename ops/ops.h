// Every op's public header.
#pragma once

#include "ops/batch_norm.h"
#include "ops/binary.h"
#include "ops/conv2d.h"
#include "ops/dropout.h"
#include "ops/group_norm.h"
#include "ops/instance_norm.h"
#include "ops/layer_norm.h"
#include "ops/loss.h"
#include "ops/matmul.h"
#include "ops/pooling.h"
#include "ops/reduce.h"
#include "ops/shape_ops.h"
#include "ops/softmax.h"
#include "ops/unary.h"
