"""rocescope.collectors.snmp"""
