"""rocescope.collectors.pcap"""
