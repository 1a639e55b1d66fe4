"""rocescope.collectors.jobs"""
