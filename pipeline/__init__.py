"""rocescope.pipeline"""
