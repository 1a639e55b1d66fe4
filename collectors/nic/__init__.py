"""rocescope.collectors.nic"""
