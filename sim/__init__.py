"""rocescope.sim"""
