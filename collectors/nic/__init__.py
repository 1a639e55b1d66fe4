"""`host.py`: the device seam `NicHost` over sysfs and `ethtool -S`: live (`LiveHost`) and recorded (`FixtureHost`)
`sysfs.py`: sysfs from a directory tree or from memory (`path: value` dumps), RDMA port state and rate
`ethtool.py`: `ethtool -S` text -> port-level statistics (per-queue ones skipped), driver -> catalog vendor
`normalize.py`: raw names -> canonical `counters` rows through the catalog, unknown names kept raw
`vendors.py`: which catalog vendor names an RDMA device's hw_counters (by its driver, else its name)
`collector.py`: discovery, per-target polling and health, `NicCollector`, `NicMetrics`
`config.py`: the `collectors.nic` config section
"""
