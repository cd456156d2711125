"""DeepLabv3+ with a modified aligned Xception encoder (output stride 16), as the MLPerf HPC
DeepCAM reference (mlcommons/hpc deepcam/src/deepCam/architecture/deeplab_xception.py):
encoder -> ASPP (1x1, 3x3 dilated 6/12/18, image pooling) -> decoder with transposed convs.
The image-pooling branch is broadcast to the actual feature size (the reference hard-codes
48x72). Single-device; toggles are applied by the harness."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from workloads.deepcam.spec import DeepCAMSize


def same_padding(kernel: int, dilation: int) -> int:
    """TF 'same' padding of a stride-1 conv, as the reference's compute_padding: the effective
    kernel k + (k-1)(d-1) less one, split begin/end. For odd kernels the split is even, so it is
    the convolution's own symmetric padding (no separate pad op, copy or fill per layer)."""
    total = kernel + (kernel - 1) * (dilation - 1) - 1
    assert total % 2 == 0, "even kernels would pad unevenly"
    return total // 2


class SeparableConv2dSame(nn.Module):
    """Depthwise kxk (TF 'same' padding) + pointwise 1x1, no bias."""

    def __init__(self, c_in: int, c_out: int, kernel: int = 3, stride: int = 1, dilation: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_in, kernel, stride, same_padding(kernel, dilation), dilation, groups=c_in,
                               bias=False)
        self.pointwise = nn.Conv2d(c_in, c_out, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pointwise(self.conv1(x))


class StridedPointwise(nn.Conv2d):
    """1x1 conv with stride s. On CPU with a channels_last input it runs as x[..., ::s, ::s] then
    a stride-1 1x1 conv: the same function and parameters, because torch 2.13's CPU backward of
    a strided 1x1 conv in that layout corrupts the heap (free(): invalid next size) - reproduced
    with a bare nn.Conv2d(8, 16, 1, stride=2), and rechecked on 2026-12-01 on an AMD EPYC:
    nn.Conv2d(4, 8, 1, stride=2) on a 2x4x96x144 channels_last input segfaults within 20 passes
    (tests/test_deepcam_structure.py keeps this path honest). NCHW inputs and CUDA keep the
    fused strided kernel, as the reference does (no slice ops in their steps)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.stride[0]
        if s == 1 or x.device.type != "cpu" or x.is_contiguous():
            return super().forward(x)
        return F.conv2d(x[:, :, ::s, ::s], self.weight, self.bias)


class Block(nn.Module):
    """The reference's Xception block: (separable conv, BN, ReLU) x reps without the last ReLU,
    a strided or final separable conv, plus the skip path (1x1 conv + BN when the shape
    changes), then a ReLU when `end_with_relu`. No ReLU at the start: the block's input is
    already rectified by the block before it, so the skip path sees the rectified tensor too."""

    def __init__(self, c_in: int, c_out: int, reps: int, stride: int = 1, dilation: int = 1,
                 end_with_relu: bool = True, grow_first: bool = True, is_last: bool = False):
        super().__init__()
        self.end_with_relu = end_with_relu
        # False under selective recomputation (harness/parallel/recompute.py): when rep ends with
        # a separable conv, x is that conv's output, which the policy keeps by reference
        self.inplace = True
        if c_out != c_in or stride != 1:
            self.skip = StridedPointwise(c_in, c_out, 1, stride=stride, bias=False)
            self.skipbn = nn.BatchNorm2d(c_out)
        else:
            self.skip = None
        rep: list[nn.Module] = []
        filters = c_in
        if grow_first:
            rep += [SeparableConv2dSame(c_in, c_out, 3, 1, dilation), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]
            filters = c_out
        for _ in range(reps - 1):
            rep += [SeparableConv2dSame(filters, filters, 3, 1, dilation), nn.BatchNorm2d(filters), nn.ReLU(inplace=True)]
        if not grow_first:
            rep += [SeparableConv2dSame(c_in, c_out, 3, 1, dilation), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]
        rep = rep[:-1]  # the reference drops the last ReLU of the stack
        if stride != 1:
            rep.append(SeparableConv2dSame(c_out, c_out, 3, stride=2))
        if stride == 1 and is_last:
            rep.append(SeparableConv2dSame(c_out, c_out, 3, stride=1))
        self.rep = nn.Sequential(*rep)

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        x = self.rep(inp)
        skip = self.skipbn(self.skip(inp)) if self.skip is not None else inp
        x = x.add_(skip) if self.inplace else x + skip  # in place: x is the block's own
        return F.relu(x, inplace=self.inplace) if self.end_with_relu else x


class Xception(nn.Module):
    """Modified aligned Xception, OS 16: entry flow, `middle_blocks` middle blocks, exit flow."""

    def __init__(self, s: DeepCAMSize):
        super().__init__()
        c = s.ch
        self.conv1 = nn.Conv2d(s.in_channels, c(32), 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c(32))
        self.conv2 = nn.Conv2d(c(32), c(64), 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c(64))
        self.block1 = Block(c(64), c(128), reps=2, stride=2, end_with_relu=False)
        self.block2 = Block(c(128), c(256), reps=2, stride=2)
        self.block3 = Block(c(256), c(728), reps=2, stride=2, is_last=True)
        self.middle = nn.Sequential(*[Block(c(728), c(728), reps=3) for _ in range(s.middle_blocks)])
        self.block20 = Block(c(728), c(1024), reps=2, stride=1, dilation=1, end_with_relu=False, grow_first=False,
                             is_last=True)
        self.conv3 = SeparableConv2dSame(c(1024), c(1536), 3, dilation=2)
        self.bn3 = nn.BatchNorm2d(c(1536))
        self.conv4 = SeparableConv2dSame(c(1536), c(1536), 3, dilation=2)
        self.bn4 = nn.BatchNorm2d(c(1536))
        self.conv5 = SeparableConv2dSame(c(1536), c(2048), 3, dilation=2)
        self.bn5 = nn.BatchNorm2d(c(2048))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # every encoder ReLU in place, as the reference's shared nn.ReLU(inplace=True)
        x = F.relu(self.bn1(self.conv1(x)), inplace=True)
        x = F.relu(self.bn2(self.conv2(x)), inplace=True)
        # the reference rectifies block 1's output in place, so the decoder's low-level branch
        # (1/4 resolution) takes the rectified tensor as well
        low_level = F.relu(self.block1(x), inplace=True)
        x = self.block3(self.block2(low_level))
        x = self.block20(self.middle(x))  # no ReLU after block 20 (end_with_relu=False)
        x = F.relu(self.bn3(self.conv3(x)), inplace=True)
        x = F.relu(self.bn4(self.conv4(x)), inplace=True)
        return F.relu(self.bn5(self.conv5(x)), inplace=True), low_level


def conv_bn_relu(c_in: int, c_out: int, k: int, dilation: int = 1) -> nn.Sequential:
    pad = 0 if k == 1 else dilation
    return nn.Sequential(nn.Conv2d(c_in, c_out, k, padding=pad, dilation=dilation, bias=False),
                         nn.BatchNorm2d(c_out), nn.ReLU())


class ImagePooling(nn.Module):
    """Global average pool -> 1x1 conv -> per-channel affine (no BN on a 1x1 map) -> ReLU,
    broadcast back to the feature map's size."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 1, bias=False)
        # (C, 1, 1) as the reference's TrainableAffine: a 3-d parameter keeps one layout under
        # .to(channels_last), so its gradient is taken as is (a 4-d one was copied every step)
        self.scale = nn.Parameter(torch.ones(c_out, 1, 1))
        self.shift = nn.Parameter(torch.zeros(c_out, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.conv(x.mean(dim=(2, 3), keepdim=True)) * self.scale + self.shift)
        return y.expand(-1, -1, x.shape[2], x.shape[3])


def deconv_bn_relu(c: int) -> nn.Sequential:
    return nn.Sequential(nn.ConvTranspose2d(c, c, 3, stride=2, padding=1, output_padding=1, bias=False),
                         nn.BatchNorm2d(c), nn.ReLU())


class DeepLabv3Plus(nn.Module):
    def __init__(self, s: DeepCAMSize):
        super().__init__()
        c = s.ch
        self.encoder = Xception(s)
        self.aspp = nn.ModuleList([conv_bn_relu(c(2048), c(256), 1)] +
                                  [conv_bn_relu(c(2048), c(256), 3, d) for d in (6, 12, 18)])
        self.image_pool = ImagePooling(c(2048), c(256))
        self.bottleneck = nn.Sequential(nn.Conv2d(5 * c(256), c(256), 1, bias=False), nn.BatchNorm2d(c(256)), nn.ReLU())
        self.low_level = conv_bn_relu(c(128), c(48), 1)
        self.upsample = nn.Sequential(deconv_bn_relu(c(256)), deconv_bn_relu(c(256)))   # 1/16 -> 1/4
        self.last_conv = nn.Sequential(conv_bn_relu(c(256) + c(48), c(256), 3), conv_bn_relu(c(256), c(256), 3),
                                       nn.Conv2d(c(256), c(256), 1))
        self.up2 = deconv_bn_relu(c(256))                                                 # 1/4 -> 1/2
        self.classifier = nn.ConvTranspose2d(c(256), s.n_classes, 3, stride=2, padding=1, output_padding=1,
                                             bias=False)                                  # 1/2 -> 1
        for m in [*self.encoder.modules(), *self.aspp.modules(), *self.image_pool.modules(), *self.bottleneck.modules()]:
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)   # reference: encoder + ASPP; decoder keeps defaults

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats, low = self.encoder(x)
        x = torch.cat([branch(feats) for branch in self.aspp] + [self.image_pool(feats)], dim=1)
        x = self.upsample(self.bottleneck(x))
        x = self.last_conv(torch.cat([x, self.low_level(low)], dim=1))
        return self.classifier(self.up2(x))  # logits N, n_classes, H, W
