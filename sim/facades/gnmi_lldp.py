"""gNMI LLDP facade: a grpc gNMI target on loopback serving one simulated switch's openconfig-lldp state.

Apart from `gnmi.GnmiFacade` (which serves counters), with the grpc plumbing of `gnmi_server`. It serves
`/lldp/interfaces/interface[name=P]/neighbors/neighbor[id=N]/state` for every cabled port of the
device (under a deployment profile, `names`: its OS's port names, and the port id each peer advertises:
a name, or a SONiC alias of subtype LOCAL), as an SONiC/OpenConfig switch would: Get and Subscribe ONCE
(STREAM is refused: LLDP state is read on a slow poll). JSON/JSON_IETF answers carry one object per
neighbor (`system-name`, `port-id`, `port-id-type`, `chassis-id`...); PROTO answers carry typed string
leaves. `get_enabled=False` makes Get UNIMPLEMENTED (the collector then falls back to ONCE); `extra()`
yields items (Notifications, or raw bytes) sent after the neighbors, for tests of malformed answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import grpc

from rocescope.collectors.gnmi.proto import pb
from rocescope.sim.facades.gnmi_server import ONCE, PROTO, capabilities, gnmi_path, set_json, start_server
from rocescope.sim.facades.lldp import chassis_mac, port_id
from rocescope.sim.portnames import PortNames
from rocescope.sim.topology import Topology

__all__ = ["LldpGnmiFacade"]


class LldpGnmiFacade:
    """A gNMI target (loopback, free port) serving `device`'s LLDP neighbors from the topology."""

    def __init__(
        self,
        topology: Topology,
        device: str,
        *,
        host: str = "127.0.0.1",
        get_enabled: bool = True,
        extra: Callable[[], Iterable[Any]] | None = None,
        names: PortNames | None = None,
    ) -> None:
        self.topology = topology
        self.names = names
        self.device = device
        self.host = host
        self.port = 0
        self.get_enabled = get_enabled
        self.extra = extra
        self.gets = 0
        self.subscribes = 0
        self._server: Any = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __enter__(self) -> LldpGnmiFacade:
        rpcs = {"Capabilities": self._capabilities, "Get": self._get, "Subscribe": self._subscribe}
        server, self.port = start_server(rpcs, host=self.host, max_workers=4, thread_name_prefix="gnmi-lldp")
        self._server = server
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.stop(None).wait()
            self._server = None

    def _state(self, port: Any) -> dict[str, str]:
        subtype, value = port_id(port, self.names)
        kind = "INTERFACE_NAME" if subtype == "ifname" else "LOCAL"
        return {
            "openconfig-lldp:system-name": port.peer_device,
            "openconfig-lldp:port-id": value,
            "openconfig-lldp:port-id-type": f"openconfig-lldp-types:{kind}",
            "openconfig-lldp:port-description": value,
            "openconfig-lldp:chassis-id": chassis_mac(self.topology, port.peer_device),
            "openconfig-lldp:chassis-id-type": "openconfig-lldp-types:MAC_ADDRESS",
            "openconfig-lldp:id": port.peer_device,
        }

    def notifications(self, encoding: int) -> list[Any]:
        out = []
        for port in self.topology.ports_of(self.device):
            prefix = gnmi_path(
                [
                    ("lldp", ()),
                    ("interfaces", ()),
                    ("interface", (("name", self.names.local(self.device, port.name) if self.names else port.name),)),
                    ("neighbors", ()),
                    ("neighbor", (("id", port.peer_device),)),
                ]
            )
            n = pb.Notification(timestamp=1, prefix=prefix)
            state = self._state(port)
            if encoding == PROTO:
                for leaf, value in state.items():
                    u = n.update.add()
                    u.path.elem.add(name="state")
                    u.path.elem.add(name=leaf.rpartition(":")[2])
                    u.val.string_val = value
            else:
                u = n.update.add()
                u.path.elem.add(name="state")
                set_json(u.val, json.dumps(state).encode(), encoding)
            out.append(n)
        return out

    def _capabilities(self, request: Any, context: Any) -> Any:
        return capabilities([("openconfig-lldp", "OpenConfig working group", "")])

    def _get(self, request: Any, context: Any) -> Any:
        if not self.get_enabled:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "Get is not served here")
        self.gets += 1
        extra = [n for n in (self.extra() if self.extra is not None else ()) if not isinstance(n, bytes)]
        return pb.GetResponse(notification=[*self.notifications(request.encoding), *extra])

    def _subscribe(self, requests: Iterator[Any], context: Any) -> Iterator[Any]:
        first = next(requests, None)
        if first is None or first.WhichOneof("request") != "subscribe":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "want a subscription list")
            return
        if first.subscribe.mode != ONCE:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "only ONCE subscriptions are served")
        self.subscribes += 1
        for n in self.notifications(first.subscribe.encoding):
            yield pb.SubscribeResponse(update=n)
        if self.extra is not None:
            for item in self.extra():
                yield item if isinstance(item, bytes) else pb.SubscribeResponse(update=item)
        yield pb.SubscribeResponse(sync_response=True)
