"""rocescope: observability for RoCEv2 training fabrics."""

__version__ = "0.1.0"
