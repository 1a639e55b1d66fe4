"""`scenario.py`: scenario files (fabric, jobs, hashing, incidents) as small YAML; `scenarios/` the shipped ones
`topology.py`: the fabric's static shape, a leaf-spine named like real gear
`jobs.py`: training jobs and the RoCE flows their collectives put on the wire
`roce.py`: RoCEv2 5-tuples, QP numbers and UDP source ports
`ecmp.py`: ECMP path selection per switch hash function and seed
`params.py`: the fluid model's knobs with field defaults
`engine.py`: the fluid model (described there): `Engine` with its incident knobs and probes
`stepper.py`: the engine's mechanics: arrays over time, paths, clock, scheduled actions, snapshots
`arrays.py`: the kernel's arrays built from topology, jobs and flows; routed paths written into them
`kernel.py`: the compiled time step (numba)
`pfcwd.py`: SONiC's PFC watchdog on the switches' lossless queues (detection, drop/forward, restoration)
`counters.py`: what the simulated devices report, as columnar snapshots
`incidents.py`: a scenario to a running world: engine, incidents armed, ground truth
`traffic.py`: the extra traffic incidents and `traffic:` entries put on the wire (fan-in, elephants, storage)
`arming.py`: incidents armed on the engine, and the ground truth each one yields (culprit jobs included)
`collectives.py`: the training jobs' NCCL collectives timed by the fabric, as Inspector records; their QP owners
`impact.py`: what each incident cost each job (victims, GPU-seconds lost), against a counterfactual fabric
`mirror.py`: the packet mirror: sampled RoCEv2 packets as rows and pcapng files
`profile.py`: deployment profiles (switch side, NIC side, clocks, LLDP side) as small YAML; `profiles/` the shipped ones
`portnames.py`: port and RDMA device names as each switch OS and NIC driver spells them
`gear.py`: a profile applied to a fast-path run: names, metrics, cadence, device clocks, LLDP side, ground truth
`run.py`: the fast path: a scenario's telemetry straight into the store through the pipeline
`serve.py`: a scenario served over the protocols and collected back in lockstep
`collection.py`: the collectors of a served run (NIC fleet, SNMP speeds, LLDP links, mirror files)
`facades/`: what the fabric serves to real collectors, one module per protocol
`evaluate.py`: the evaluation harness: detectors scored strictly against ground truth, per profile
"""
