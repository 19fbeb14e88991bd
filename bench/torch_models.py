"""PyTorch twins of minidl's bundled models (models/) and the UNet3d step's
loss, shared by the benchmark scripts (bench_torch.py, bench_gpu_torch.py)."""
import torch
import torch.nn.functional as F
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18Cifar(nn.Module):
    """minidl's models::resnet18_cifar: 3x3 stem, no max-pool, [2,2,2,2] BasicBlocks."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


class ResNetCifarHe(nn.Module):
    """minidl's models::resnet20 / resnet56: He et al.'s CIFAR ResNets (stem 3->16, stages of n BasicBlocks,
    widths 16-32-64, strides 1-2-2, global average pool), option-B (1x1 conv + BN) shortcuts."""

    def __init__(self, n, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        blocks, cin = [], 16
        for cout, stride in [(16, 1), (32, 2), (64, 2)]:
            for i in range(n):
                blocks.append(BasicBlock(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        out = self.blocks(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


def small_net(num_classes=10):
    """minidl's models::SmallNet: conv-BN-ReLU, three conv-maxpool-BN-ReLU stages, global max-pool, linear."""
    layers = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
    cin = 64
    for cout in (128, 256, 512):
        layers += [nn.Conv2d(cin, cout, 3, 1, 1, bias=False), nn.MaxPool2d(2), nn.BatchNorm2d(cout), nn.ReLU()]
        cin = cout
    layers += [nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)]
    return nn.Sequential(*layers)


def bce_dice_loss(logits, target, smooth=1.0):
    """ops/dice_loss.h: BCE-with-logits (mean) + 1 - mean per-sample soft Dice."""
    p = torch.sigmoid(logits).flatten(1)
    t = target.flatten(1)
    dice = (2 * (p * t).sum(1) + smooth) / (p.sum(1) + t.sum(1) + smooth)
    return F.binary_cross_entropy_with_logits(logits, target) + (1 - dice.mean())
