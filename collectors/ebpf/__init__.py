"""`loader.py`: bcc, the programs' C text, kernel headers, tracefs, tracepoint fields, drop reasons, kprobes
`owners.py`: pid -> comm, cgroup, pod and job from /proc (`ProcOwnerResolver`)
`rdma_qp.py`: the `QpSource` seam: `rdma resource show qp -j` (live or recorded), RoCEv2 UDP ports and GIDs
`capabilities.py`: this process's Linux capabilities, and the collector's privilege check
`collector.py`: attach, QP events, map and QP table reads -> `counters` and `qp_owners`, `EbpfCollector`
`config.py`: the `collectors.ebpf` config section
`programs/`: the BPF C sources (tracepoints, XDP, QP kprobes)
"""
