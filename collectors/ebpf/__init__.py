"""rocescope.collectors.ebpf"""
