"""rocescope.dashboards"""
