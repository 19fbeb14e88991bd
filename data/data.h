// minidl::data: datasets, transforms, samplers and the threaded DataLoader.
#pragma once

#include "data/cifar10.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/fashion_mnist.h"
#include "data/image_folder.h"
#include "data/sampler.h"
#include "data/subset.h"
#include "data/transforms.h"
