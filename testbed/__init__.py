"""rocescope.testbed"""
