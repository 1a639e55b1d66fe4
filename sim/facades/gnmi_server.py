"""The gNMI server plumbing the simulated targets share (`gnmi.GnmiFacade` for counters, `gnmi_lldp` for LLDP).

A grpc server answering the `gnmi.gNMI` service with the RPCs a facade implements, the encodings they
answer in, Capabilities, paths built from (name, keys) elements, and JSON values as the request asked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from rocescope.collectors.gnmi.proto import GNMI_VERSION, pb

#: gNMI encodings (gnmi.proto `Encoding`) and subscription list modes
JSON, PROTO, JSON_IETF = 0, 2, 4
ENCODINGS = (JSON, PROTO, JSON_IETF)
STREAM, ONCE = 0, 1

#: (name, keys as sorted (key, value) pairs): one element of a gNMI path
Elem = tuple[str, tuple[tuple[str, str], ...]]

_REQUESTS: dict[str, Any] = {
    "Capabilities": pb.CapabilityRequest,
    "Get": pb.GetRequest,
    "Set": pb.SetRequest,
    "Subscribe": pb.SubscribeRequest,
}


def serialize(message: Any) -> bytes:
    """A response message as bytes; raw bytes pass as they are (tests send malformed answers that way)."""
    return message if isinstance(message, bytes) else bytes(message.SerializeToString())


def start_server(
    rpcs: Mapping[str, Callable[..., Any]],
    *,
    host: str,
    port: int = 0,
    tls: tuple[bytes, bytes] | None = None,
    max_workers: int,
    thread_name_prefix: str,
) -> tuple[Any, int]:
    """A started grpc server answering the gNMI RPCs in `rpcs` (Subscribe streams, the others are unary) on
    `host:port` (a free port for 0), with TLS from (certificate chain PEM, private key PEM); and its port."""
    server = grpc.server(ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=thread_name_prefix))
    handlers = {
        name: (grpc.stream_stream_rpc_method_handler if name == "Subscribe" else grpc.unary_unary_rpc_method_handler)(
            rpc, _REQUESTS[name].FromString, serialize
        )
        for name, rpc in rpcs.items()
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("gnmi.gNMI", handlers),))
    bind = f"{host}:{port}"
    if tls is None:
        bound = server.add_insecure_port(bind)
    else:
        bound = server.add_secure_port(bind, grpc.ssl_server_credentials([(tls[1], tls[0])]))
    if not bound:
        raise OSError(f"gNMI facade: cannot listen on {bind}")
    server.start()
    return server, bound


def capabilities(models: Sequence[tuple[str, str, str]]) -> Any:
    """The CapabilityResponse of a target serving `models` (name, organization, version) in every encoding."""
    return pb.CapabilityResponse(
        supported_models=[pb.ModelData(name=n, organization=o, version=v) for n, o, v in models],
        supported_encodings=list(ENCODINGS),
        gNMI_version=GNMI_VERSION,
    )


def gnmi_path(elems: Iterable[Elem], target: str = "") -> Any:
    path = pb.Path(target=target)
    for name, keys in elems:
        elem = path.elem.add(name=name)
        for k, v in keys:
            elem.key[k] = v
    return path


def set_json(val: Any, body: bytes, encoding: int) -> None:
    """A TypedValue holding JSON `body`, as JSON or JSON_IETF as the request asked."""
    if encoding == JSON:
        val.json_val = body
    else:
        val.json_ietf_val = body
