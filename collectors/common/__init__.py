"""rocescope.collectors.common"""
