"""rocescope.collectors.gnmi"""
