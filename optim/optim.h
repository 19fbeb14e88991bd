// Everything in optim/: the Optimizer base, SGD, Adam, AdamW, the learning-rate
// schedulers and gradient clipping.
#pragma once

#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"
