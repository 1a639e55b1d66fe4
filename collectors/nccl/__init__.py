"""`parse.py`: NCCL Inspector JSON lines -> `collectives` batches (pyarrow's JSON reader), mode detection
`prom.py`: Inspector's Prometheus textfile (2.29 per collective, 2.30+ aggregated) -> `collectives` rows
`tail.py`: the device seam: a directory of Inspector files read from where the last read stopped
`collector.py`: `NcclCollector` polling the directory, rows -> `collectives` batches, health per directory
`config.py`: the `collectors.nccl` section
`write.py`: Inspector's JSON lines written as the plugin writes them (the simulated fabric, tests, benches)
"""
