"""The detector suite, one module per problem, each exposing `DETECTOR` (run in the order of `run.DETECTORS`),
and the helpers they share.

`base.py`: what every detector is (name, version, kinds, thresholds) and the `Context` it reads
`pfc_storm.py`: a port held paused nearly the whole time, and the pause tree it spreads
`pfc_deadlock.py`: a cycle of ports holding each other paused
`polarization.py`: spines repeating the leaves' ECMP choice (hash polarization)
`incast.py`: many senders converging on one receiver NIC
`microburst.py`: receiver-facing queues filling in bursts shorter than the poll interval
`cnp_loss.py`: CNPs that receivers send but a sender never acts on
`link_health.py`: flapping links, degraded optics, lossless drops where PFC is off
`device_events.py`: link_health's grouping of a device's links that went down together (restarts, line cards)
`nccl_hang.py`: a job's communicator silent far beyond its step while the job runs, and the ranks that stopped first
`unexplained_slowdown.py`: a job's collectives slow with no fabric finding to explain it, and its stragglers
"""
