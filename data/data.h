// minidl::data: datasets, transforms, samplers and the threaded DataLoader.
#pragma once

#include "minidl/data/cifar10.h"
#include "minidl/data/dataloader.h"
#include "minidl/data/dataset.h"
#include "minidl/data/fashion_mnist.h"
#include "minidl/data/grain_volumes.h"
#include "minidl/data/image_folder.h"
#include "minidl/data/npy.h"
#include "minidl/data/sampler.h"
#include "minidl/data/subset.h"
#include "minidl/data/transforms.h"
#include "minidl/data/volume_dataset.h"
