"""The one set of gNMI protobuf stubs this process uses: import them from here, never elsewhere.

protobuf keeps one descriptor pool per process and refuses a second registration of `gnmi.proto`
under different stubs, so exactly one stub package may be imported. We use the stubs pygnmi ships
(`pygnmi.spec.v080`, gNMI 0.8.0: every message the collector and the simulator's target need); they
are plain generated code, and importing them does not import pygnmi's client.
"""

from __future__ import annotations

from pygnmi.spec.v080 import gnmi_pb2 as pb
from pygnmi.spec.v080 import gnmi_pb2_grpc as pb_grpc

__all__ = ["GNMI_VERSION", "pb", "pb_grpc"]

#: The gNMI version of the stubs, as a target reports it in CapabilityResponse.
GNMI_VERSION = "0.8.0"
