"""Floor 1: statistics: estimators (medians, bootstrap CIs, geomeans, verdicts), paired
speedups, the stability verdict, MLPerf scoring. numpy only; imports only results.record."""
