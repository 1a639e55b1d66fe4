"""`objects.py`: the MIB columns polled (`SnmpObject`, `OBJECTS`), default/optional/slow sets, OID text
`agent.py`: the device seam `SnmpAgent`: live pysnmp (`PysnmpAgent`, v2c/v3) and recorded `.snmprec` walks
`normalize.py`: walked varbinds -> `counters` rows (`CounterRows`), ifIndex -> port name
`collector.py`: `SnmpDevice`, per-device polling loops and health, `SnmpCollector`, `SnmpMetrics`
`config.py`: the `collectors.snmp` config section
"""
