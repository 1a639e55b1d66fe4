"""What the simulated fabric serves to real collectors, one module per protocol.

`server.py`: every facade of one world, as its deployment profile's gear reports it, tick by tick (`FabricServer`)
`clock.py`: what each device has read, the fabric clock the facades serve, the lockstep barrier (`FabricClock`)
`gnmi.py`: a gNMI target per switch, serving its counters (`GnmiFacade`)
`gnmi_paths.py`: where each switch OS (SONiC, OpenConfig, SR Linux, Cumulus) serves a counter; the subscriptions
`gnmi_render.py`: counters rows -> gNMI paths and notifications, cached per table layout
`gnmi_server.py`: grpc plumbing the gNMI targets share (server, Capabilities, paths, JSON values)
`gnmi_lldp.py`: a gNMI target serving a switch's openconfig-lldp state
`snmp.py`: SNMP v2c agents (IF-MIB, ifHighSpeed, PFC MIBs: IEEE, Mellanox, Arista)
`hostview.py`: a host (mlx5 or bnxt NICs) as a /sys tree and an `ethtool -S` view (`HostViews`)
`lldp.py`: `lldpcli -f json` per device (a SONiC switch advertising its port alias)
`pods.py`: the Kubernetes pod list of the jobs
`nccl.py`: NCCL Inspector's dump directory, a JSON-lines file per rank's process (`InspectorFiles`)
"""
