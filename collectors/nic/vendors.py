"""Which catalog vendor names an RDMA device's hw_counters: the provider's, found by the device's driver.

Providers name the same hardware counter differently (the CNPs a receiver sent: mlx5 `np_cnp_sent`, Broadcom
bnxt_re `tx_cnp_pkts` in Linux 6.6-6.17 and `np_cnp_pkts` from 6.18), and a few names are shared with other
meanings (bnxt_re's `rp_cnp_handled` counts every CNP received, mlx5's only those acted on), so each device's
hw_counters resolve under its provider's catalog vendor, picked by:

1. the driver of the device's parent, `/sys/class/infiniband/<dev>/device/driver` (the class device's own
   directory sits under its parent, so `<dev>/../../driver` where the `device` link is missing): the PCI
   function's driver (`mlx5_core`, `bnxt_en`, `ice`...) or a provider's own (`mlx5_ib`, `bnxt_re`);
2. else the name the kernel gave the device (`mlx5_0`, `bnxt_re0`, `irdma1`...). A device renamed by udev
   (`rocep8s0f0`) has no telling name: step 1 names it.

A provider without catalog names is its own vendor (its counters land as `raw:<name>`), and so is a device
neither step names (`unknown`). The IBTA PortCounters (`counters/`) are `ib_port` whatever the provider.
"""

from __future__ import annotations

__all__ = ["IB_PORT_VENDOR", "RDMA_DRIVER_VENDORS", "RDMA_NAME_VENDORS", "rdma_vendor"]

#: Vendor of the IBTA PortCounters directory (`ports/<p>/counters`), the same for every provider.
IB_PORT_VENDOR = "ib_port"
#: Driver of the RDMA device's parent (PCI function or auxiliary device) -> catalog vendor of its hw_counters.
RDMA_DRIVER_VENDORS: dict[str, str] = {
    "mlx5_core": "mlx5_rdma",
    "mlx5_ib": "mlx5_rdma",
    "bnxt_en": "bnxt_rdma",
    "bnxt_re": "bnxt_rdma",
}
#: Kernel device-name prefix -> vendor, in order (the names of drivers/infiniband/hw/*). Only mlx5 and bnxt_re
#: have catalog names; the others say what the device is and land raw.
RDMA_NAME_VENDORS: tuple[tuple[str, str], ...] = (
    ("mlx5_", "mlx5_rdma"),
    ("bnxt_re", "bnxt_rdma"),
    ("mlx4_", "mlx4"),
    ("irdma", "irdma"),
    ("qedr", "qedr"),
    ("hns_", "hns"),
    ("efa_", "efa"),
    ("erdma_", "erdma"),
    ("ionic_", "ionic"),
    ("rxe", "rxe"),
    ("siw", "siw"),
)


def rdma_vendor(driver: str, rdma_dev: str) -> str:
    """Catalog vendor of a device's hw_counters: by its parent's driver, else by its name, else the driver."""
    vendor = RDMA_DRIVER_VENDORS.get(driver)
    if vendor is not None:
        return vendor
    for prefix, by_name in RDMA_NAME_VENDORS:
        if rdma_dev.startswith(prefix):
            return by_name
    return driver or "unknown"
