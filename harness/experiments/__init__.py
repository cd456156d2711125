"""Floor 6: many runs: ablation sweeps, time-to-train and weak-scaling campaigns, the
MLPerf compliance check, compare across commits, the GPU check."""
