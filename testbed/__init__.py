"""Stand-ins that tests, benchmarks, the demo and `rocescope broker` start on loopback:
- `tansu.py`: a Kafka-protocol broker (Tansu), in memory or kept in a directory
- `s3dir.py`: an S3 endpoint over a directory, Tansu's durable storage for `broker --data`
- `chdb_http.py`: embedded chdb served over ClickHouse's HTTP interface (`serve-http`)
- `snmpd.py`: real SNMP agents (Debian's snmpd, snmpsim) for the SNMP collector
"""
