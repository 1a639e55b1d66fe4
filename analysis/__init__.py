"""rocescope.analysis"""
