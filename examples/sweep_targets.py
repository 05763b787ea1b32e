"""Example targets for `gpudoctor sweep`: a CNN and a transformer block.

    gpudoctor sweep examples/sweep_targets.py:resnet --mode infer --dtype bfloat16 --latency-p50-ms 100
    gpudoctor sweep examples/sweep_targets.py:resnet --mode train --dtype bfloat16
    gpudoctor sweep examples/sweep_targets.py:transformer_block --mode infer --dtype bfloat16 --latency-p50-ms 100
    gpudoctor sweep examples/sweep_targets.py:transformer_block --mode train --dtype bfloat16

`resnet` is torchvision's ResNet-50 when torchvision is installed, else a built-in
ResNet-18-style CNN (same layout of residual stages, no download, no dependency).
`transformer_block` is one pre-norm nn.TransformerEncoderLayer, d_model 1024, 16
heads, sequence 512. `tiny_resnet` and `tiny_transformer` are the same code at toy
sizes: a CPU measures them in a blink (the tests use them).

Each function follows the sweep contract: build(batch_size=None) returns a
SweepTarget (model, make_batch, and for training a loss and an optimizer).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from gpudoctor.sweep import SweepTarget

NUM_CLASSES = 1000


class BasicBlock(nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut = nn.Sequential()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class SmallResNet(nn.Module):
    """ResNet-18's layout (stem, four stages of basic blocks, pooled classifier)."""

    def __init__(
        self, widths: tuple[int, ...] = (64, 128, 256, 512), blocks: int = 2, classes: int = NUM_CLASSES
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        stages, inputs = [], widths[0]
        for i, width in enumerate(widths):
            for j in range(blocks):
                stages.append(BasicBlock(inputs, width, 2 if (j == 0 and i > 0) else 1))
                inputs = width
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(inputs, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.stages(self.stem(x)), 1), 1))


def _image_target(model: nn.Module, image_size: int, classes: int) -> SweepTarget:
    # channels_last is what cuDNN's tensor-core convolutions want under bf16/fp16
    model = model.to(memory_format=torch.channels_last)

    def make_batch(n: int, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        images = torch.randn(n, 3, image_size, image_size, device=device)
        return images.contiguous(memory_format=torch.channels_last), torch.randint(0, classes, (n,), device=device)

    return SweepTarget(
        model=model,
        make_batch=make_batch,
        forward=lambda m, batch: m(batch[0]),
        loss_fn=lambda output, batch: F.cross_entropy(output.float(), batch[1]),
        # the usual ImageNet recipe: its momentum buffer is part of the memory measured
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4),
    )


def resnet(batch_size: int | None = None) -> SweepTarget:
    # cuDNN picks the fastest convolution per shape; warm-up covers that search
    torch.backends.cudnn.benchmark = True
    try:
        import torchvision

        model: nn.Module = torchvision.models.resnet50(weights=None)
    except ImportError:
        model = SmallResNet()
    return _image_target(model, 224, NUM_CLASSES)


def tiny_resnet(batch_size: int | None = None) -> SweepTarget:
    return _image_target(SmallResNet(widths=(8, 16, 32, 64), blocks=1, classes=10), 32, 10)


def _transformer_target(d_model: int, heads: int, seq_len: int) -> SweepTarget:
    block = nn.TransformerEncoderLayer(
        d_model, heads, dim_feedforward=4 * d_model, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
    )

    def make_batch(n: int, device: torch.device | None = None) -> torch.Tensor:
        return torch.randn(n, seq_len, d_model, device=device)

    # training: the default loss (mean of the output) and the default optimizer (SGD, lr=0)
    return SweepTarget(model=block, make_batch=make_batch)


def transformer_block(batch_size: int | None = None) -> SweepTarget:
    return _transformer_target(d_model=1024, heads=16, seq_len=512)


def tiny_transformer(batch_size: int | None = None) -> SweepTarget:
    return _transformer_target(d_model=32, heads=4, seq_len=16)
