"""`framing.py`: classic pcap record framing (file header, record offsets and headers)
`pcapng.py`: pcapng block walking (sections, interfaces, packet blocks)
`fast.py`: numpy decode of every frame of a pcap/pcapng to `packets` rows
`tshark.py`: pyshark/tshark packet sources (file, live) and per-packet decoding, for other formats
`ring.py`: live capture into dumpcap's ring of files, each closed file landed
`collector.py`: `PcapCollector`, a packet source to `packets` batches with skip counts
`config.py`: the `collectors.pcap` section
"""
