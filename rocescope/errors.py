"""The project's own error types: every failure the pipeline expects is one of these."""


class RocescopeError(Exception):
    """Base of every error rocescope raises on purpose."""


class ConfigError(RocescopeError):
    """The configuration file or environment is invalid."""


class SchemaError(RocescopeError):
    """Data does not match the schema declared in rocescope.schema."""


class DecodeError(RocescopeError):
    """A message or device output could not be decoded."""


class StoreError(RocescopeError):
    """The store (ClickHouse server or embedded chdb) refused or failed an operation."""


class TransportError(RocescopeError):
    """The transport (Kafka or in-process) failed."""


class NicReadError(RocescopeError):
    """One NIC (netdev or RDMA port) could not be read; the other targets of the host go on."""


class SimError(RocescopeError, ValueError):
    """A fabric, job or scenario description that cannot be built as asked."""


class NoRouteError(SimError):
    """No path exists between two NICs (every equal-cost next hop is down)."""
