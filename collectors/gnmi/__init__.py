"""`proto.py`: the one set of gNMI protobuf stubs the process imports
`paths.py`: gNMI path text <-> (name, keys) elements, escaping
`resolve.py`: paths -> (port, priority, catalog metric, raw name) (`resolve_elems`, `is_sonic`)
`values.py`: values as devices spell them: numbers, state words, port speeds as words (`reading`)
`decode.py`: `GnmiDecoder` (responses -> `counters` Batch)
`targets.py`: `GnmiTarget`, its subscriptions (`GnmiPath`), default paths and intervals, `load_targets`
`collector.py`: streams with reconnects and a stall watch, `GnmiCollector`, `GnmiMetrics`
`config.py`: the `collectors.gnmi` config section
"""
