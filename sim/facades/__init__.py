"""What the simulated fabric serves to real collectors, one module per protocol.

`server.py`: every facade of one world, published tick by tick (`FabricServer`)
`clock.py`: the fabric clock the facades serve, with the lockstep barrier (`FabricClock`)
`gnmi.py`: a gNMI target per switch, serving its counters (`GnmiFacade`)
`gnmi_render.py`: counters rows -> gNMI paths and notifications, cached per table layout
`gnmi_server.py`: grpc plumbing the gNMI targets share (server, Capabilities, paths, JSON values)
`gnmi_lldp.py`: a gNMI target serving a switch's openconfig-lldp state
`snmp.py`: SNMP v2c agents (IF-MIB, ifHighSpeed, PFC MIBs)
`hostview.py`: a host as a /sys tree and an `ethtool -S` view (`write_host_view`, `HostViews`)
`lldp.py`: `lldpcli -f json` per device
`pods.py`: the Kubernetes pod list of the jobs
"""
