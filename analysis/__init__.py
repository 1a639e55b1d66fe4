"""`frames.py`: one window's data as polars frames (aligned series, rates, totals), read from the store
`window_scan.py`: what the window holds, from one scan (metrics present, sources per series, re-sending groups)
`topology_reads.py`, `window.py`: the window's topology reads (cables, names, placements, collectives); its bounds
`claims.py`: which of overlapping findings a job's loss goes to; `cnp_peers.py`: where CNPs go
`fabric.py`: the topology as the analysis sees it (LLDP `links`, tiers, port kinds)
`episodes.py`: consecutive samples meeting a condition, joined into time spans
`findings.py`: what a detector reports and how it lands in the `findings` table
`run.py`: one analysis run: every enabled detector over a window, findings attributed to jobs
`present.py`: findings as terminal tables and JSON, ranked per job
`collectives.py`: NCCL collective timings, each attributed to its job (qp_owners, endpoints)
`impact.py`: what each finding cost each job (GPU-seconds lost, inflation) against the job's own baseline
`blame.py`: whose traffic caused each finding (culprits) apart from whom it hurt (victims); who hurt whom
`detectors/`: one module per problem
`report/`: the HTML incident report
`notebooks/`: the incident notebook
"""
