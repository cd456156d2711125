"""DeepCAM sizes. `full` is the MLPerf HPC reference (16 x 768 x 1152 input, 56,454,720
parameters); smaller sizes run the same code at lower resolution, with a channel width
multiplier and fewer middle-flow blocks."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeepCAMSize:
    name: str
    height: int               # must be divisible by 16 (output stride)
    width: int
    width_mult: float         # channel multiplier on every layer (reference: 1.0)
    middle_blocks: int        # Xception middle flow (reference: 16)
    batch_size: int
    n_train: int
    n_val: int
    quality_target: float     # validation mean IoU; MLPerf: 0.82 at full size
    lr: float = 1e-3
    warmup_steps: int = 0
    milestones: tuple[int, ...] = (800,)
    decay_rate: float = 0.1
    weight_decay: float = 1e-2
    in_channels: int = 16
    n_classes: int = 3

    def ch(self, c: int) -> int:
        return max(1, int(round(c * self.width_mult)))

    @property
    def input_shape(self) -> tuple[int, ...]:
        """One sample as stored: H, W, C float32."""
        return (self.height, self.width, self.in_channels)


SIZES = {
    "tiny": DeepCAMSize("tiny", height=96, width=144, width_mult=0.125, middle_blocks=2, batch_size=8,
                        n_train=256, n_val=64, quality_target=0.82, lr=3e-3, warmup_steps=10,
                        milestones=(400,)),
    "small": DeepCAMSize("small", height=192, width=288, width_mult=0.25, middle_blocks=4, batch_size=8,
                         n_train=256, n_val=64, quality_target=0.75, lr=2e-3, warmup_steps=20,
                         milestones=(800,)),
    "full": DeepCAMSize("full", height=768, width=1152, width_mult=1.0, middle_blocks=16, batch_size=2,
                        n_train=64, n_val=16, quality_target=0.82, lr=1e-3, warmup_steps=0, milestones=(800,)),
}
