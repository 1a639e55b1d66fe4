"""rocescope.collectors"""
