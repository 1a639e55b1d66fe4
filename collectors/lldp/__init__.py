"""`parse.py`: lldpcli output (JSON, json0, XML, keyvalue, plain) and gNMI openconfig-lldp notifications -> neighbors
`sources.py`: the device seam: a host's lldpcli (command or capture), a switch over gNMI; hosts files
`collector.py`: `LldpCollector` polling every source, neighbors -> `links` batches
`config.py`: the `collectors.lldp` section
"""
