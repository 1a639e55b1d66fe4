"""gNMI path text <-> elements: keys holding `/`, escapes, one spelling per path, bad text refused."""

from __future__ import annotations

import pytest

from rocescope.collectors.gnmi.paths import parse_path, path_elems, path_str
from rocescope.collectors.gnmi.proto import pb


def test_parse_path_keys_with_slashes_and_escapes() -> None:
    p = parse_path(r"/a/b[name=ethernet-1/1][k=x\]y]/c", target="T")
    assert path_elems(p) == [("a", {}), ("b", {"name": "ethernet-1/1", "k": "x]y"}), ("c", {})]
    assert path_str(p) == r"T:/a/b[k=x\]y][name=ethernet-1/1]/c"
    assert path_elems(parse_path(path_str(pb.Path(elem=p.elem)))) == path_elems(p)
    for bad in ("/a/[k=v]", "/a/b[k=v", "/a/b[kv]"):
        with pytest.raises(ValueError):
            parse_path(bad)
