"""CosmoFlow sizes. `full` is the MLPerf HPC v1.0+ reference (8,907,556 parameters);
smaller sizes run the same code with a smaller cube and fewer channels."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CosmoFlowSize:
    name: str
    side: int                 # cube edge in voxels (reference: 128)
    conv_layers: int          # reference: 5
    base_channels: int        # channels of the first conv, doubled per layer (reference: 32)
    fc1: int                  # reference: 128
    fc2: int                  # reference: 64
    dropout: float            # reference: 0.5
    batch_size: int           # default global batch
    n_train: int
    n_val: int
    quality_target: float     # validation MAE; MLPerf: 0.124 at full size
    base_lr: float = 0.001    # reference: 0.001 at base_batch 64, linear scaling
    base_batch: int = 64
    warmup_epochs: int = 4
    decay_epochs: tuple[int, ...] = (32, 64)
    decay_factors: tuple[float, ...] = (0.25, 0.125)
    in_channels: int = 4      # 4 redshift bins
    n_targets: int = 4

    @property
    def input_shape(self) -> tuple[int, ...]:
        """One sample as stored on disk: D, H, W, C (int16 counts)."""
        return (self.side, self.side, self.side, self.in_channels)


SIZES = {
    # tiny: the MLPerf target, 0.124 MAE (predicting the mean scores 0.5: uniform targets in
    # [-1, 1]). With 384 training samples validation MAE plateaued at ~0.145 (overfitting); with
    # 1536 it reaches 0.122 after 960 steps (80 s on 2 CPU cores).
    "tiny": CosmoFlowSize("tiny", side=32, conv_layers=4, base_channels=8, fc1=64, fc2=32,
                          dropout=0.0, batch_size=8, n_train=1536, n_val=96, quality_target=0.124,
                          base_lr=0.005, base_batch=8, warmup_epochs=1, decay_epochs=(6, 9),
                          decay_factors=(0.5, 0.25)),
    "small": CosmoFlowSize("small", side=64, conv_layers=5, base_channels=16, fc1=128, fc2=64,
                           dropout=0.0, batch_size=16, n_train=512, n_val=128, quality_target=0.2,
                           base_lr=0.01, base_batch=16, warmup_epochs=1, decay_epochs=(8, 12),
                           decay_factors=(0.5, 0.25)),
    "full": CosmoFlowSize("full", side=128, conv_layers=5, base_channels=32, fc1=128, fc2=64,
                          dropout=0.5, batch_size=64, n_train=1024, n_val=256, quality_target=0.124),
}
