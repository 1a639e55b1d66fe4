"""Facades of the simulated fabric: what real collectors read from it (host sysfs and `ethtool -S`,
LLDP neighbors, the Kubernetes pod list)."""

from rocescope.sim.facades.hostview import write_host_view
from rocescope.sim.facades.lldp import lldp_neighbors_json
from rocescope.sim.facades.pods import pod_list_json

__all__ = ["lldp_neighbors_json", "pod_list_json", "write_host_view"]
