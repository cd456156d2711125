"""Workload packages. Each exposes WORKLOAD implementing workloads.base.Workload."""
