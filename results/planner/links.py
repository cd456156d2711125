"""How long the planner's collectives and sends take, from the collectives records
(`python -m harness comm`, results/comm/) or from an estimate the inventory gives.

Measured: the newest finished all_reduce and send_recv records of the inventory's backend.
At the rank count they were measured at, a call's time is interpolated between the measured
sizes (results/comm_record.time_at). At another count (a what-if), the ring model: latency
(the smallest size's time) + factor(n) x S / busbw (the largest size's), the factor from
nccl-tests' bus bandwidth definition. Estimated: the same ring model with the inventory's
busbw and latency.

The host relay (between kinds whose collective libraries differ, inventory.relay_between): measured
from the newest `harness comm --via host` records of the backend (device -> host copy, the
collective between hosts, host -> device, all in the timed call), else the direct path plus the
two copies at links.pcie_gb_per_s. Neither there: a plan that needs the relay is a PlanError.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from results.record import comm as comm_record
from results.record import schema
from results.planner.inventory import Links, PlanError


class LinkModel:
    def __init__(self, links: Links, results: Path):
        self.measured = links.measured
        self.overlaps = links.overlaps  # DDP hides its all-reduce behind the backward (inventory.Links)
        self.tables: dict[str, tuple[int, list[dict]]] = {}
        self.relay_tables: dict[str, tuple[int, list[dict]]] = {}
        self.pcie = links.pcie_gb_per_s * 1e9 if links.pcie_gb_per_s else None
        # each kind's own collectives (inventory.Links.kinds): for groups of that kind alone (among)
        self.kinds = {k: LinkModel(replace(links, kinds=()), root) for k, root in links.kinds}
        if links.measured:
            for coll in ("all_reduce", "send_recv"):
                relay = self._newest(results / comm_record.SUBDIR, coll, links.backend, via="host")
                if relay is not None:
                    self.relay_tables[coll] = relay
                found = self._newest(results / comm_record.SUBDIR, coll, links.backend)
                if found is None:
                    raise PlanError(f"links.collectives=measured: no finished {coll} record for backend "
                                    f"{links.backend} under {results / comm_record.SUBDIR}; run `python -m harness "
                                    f"comm` under mpiexec, or give links.busbw_gb_per_s and latency_us")
                self.tables[coll] = found
            rows = self.tables["all_reduce"][1]
            big, small = rows[-1], rows[0]
            n = self.tables["all_reduce"][0]
            self.busbw = big["bytes"] * comm_record.BUS_FACTOR["all_reduce"](n) / (
                big[f"time_us_{comm_record.best_mode(big)}"] / 1e6)
            self.latency = small[f"time_us_{comm_record.best_mode(small)}"] / 1e6
            self.source = (f"measured: {links.backend} all_reduce at {n} ranks "
                           f"({self.busbw / 1e9:.2f} GB/s busbw, {self.latency * 1e6:.0f} us), send_recv"
                           + ("; host relay measured (comm --via host)" if self.relay_tables else "")
                           + "".join(f"; {k} alone: {m.source.removeprefix('measured: ')}"
                                     for k, m in self.kinds.items()))
        else:
            self.busbw, self.latency = links.busbw_gb_per_s * 1e9, links.latency_us / 1e6
            self.source = (f"ESTIMATE: {links.busbw_gb_per_s} GB/s busbw, {links.latency_us} us latency"
                           + (f", host relay + 2 copies at {links.pcie_gb_per_s} GB/s" if links.pcie_gb_per_s else ""))

    def among(self, kinds) -> "LinkModel":
        """The links a group of these device kinds' devices uses: one kind's own where the group is
        of that kind alone and it has its own records, else the inventory's (so also for a kind
        renamed for its tensor/context groups, within_stage.grouped: its members' collectives
        inside the group use the kind's own through NodeLinks, its data-parallel ones these)."""
        ks = set(kinds)
        return self.kinds.get(next(iter(ks)), self) if len(ks) == 1 else self

    @staticmethod
    def _newest(root: Path, coll: str, backend: str, via: str = "direct") -> tuple[int, list[dict]] | None:
        best = None
        for d in schema.record_dirs(root):
            rec = schema.read_record(d)
            c = rec["config"]
            if (c.get("collective") == coll and c.get("backend") == backend and c.get("via", "direct") == via
                    and rec["status"].get("status") == schema.FINISHED):
                key = rec["status"].get("ended", 0)
                if best is None or key > best[0]:
                    best = (key, int(c["ranks"]), d)
        return None if best is None else (best[1], comm_record.table(best[2]))

    def _ring(self, coll: str, nbytes: float, n: int) -> float:
        return self.latency + comm_record.BUS_FACTOR[coll](n) * nbytes / self.busbw

    def all_reduce_s(self, nbytes: float, n: int, relay: bool = False) -> float:
        if n <= 1 or nbytes <= 0:
            return 0.0
        if relay:
            return self._relay("all_reduce", nbytes, n)
        if "all_reduce" in self.tables and self.tables["all_reduce"][0] == n:
            return comm_record.time_at(self.tables["all_reduce"][1], nbytes)
        return self._ring("all_reduce", nbytes, n)

    def send_s(self, nbytes: float, relay: bool = False) -> float:
        if nbytes <= 0:
            return 0.0
        if relay:
            return self._relay("send_recv", nbytes, 2)
        if "send_recv" in self.tables:
            return comm_record.time_at(self.tables["send_recv"][1], nbytes)
        return self._ring("send_recv", nbytes, 2)

    def _relay(self, coll: str, nbytes: float, n: int) -> float:
        """The host relay: measured where `comm --via host` recorded this collective at this rank
        count (at another count: the measured relay's extra over the direct path at the same
        size, added to the direct path's ring model), else the direct path + two copies over PCIe."""
        direct = self.all_reduce_s(nbytes, n) if coll == "all_reduce" else self.send_s(nbytes)
        if coll in self.relay_tables:
            ranks, rows = self.relay_tables[coll]
            relayed = comm_record.time_at(rows, nbytes)
            if ranks == n or coll == "send_recv":
                return relayed
            same = comm_record.time_at(self.tables[coll][1], nbytes) if coll in self.tables else direct
            return direct + max(0.0, relayed - same)
        if self.pcie is None:
            raise PlanError("these device kinds share no collective library, so their traffic takes the host relay: "
                            "measure it with `harness comm --via host` (under mpiexec) or give links.pcie_gb_per_s")
        return direct + 2 * nbytes / self.pcie
