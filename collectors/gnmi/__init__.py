"""`proto.py`: the one set of gNMI protobuf stubs the process imports
`paths.py`: gNMI path text <-> (name, keys) elements, escaping
`decode.py`: paths -> catalog metrics (`resolve_elems`), values, `GnmiDecoder` (responses -> `counters` Batch)
`targets.py`: `GnmiTarget`, its subscriptions (`GnmiPath`), default paths and intervals, `load_targets`
`collector.py`: streams with reconnects and a stall watch, `GnmiCollector`, `GnmiMetrics`
`config.py`: the `collectors.gnmi` config section
"""
