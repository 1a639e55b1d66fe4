"""`page.py`: the HTML page (`build_report`, `write_report`): findings per job, a case section per finding
`cases.py`: one finding's case: its plots by kind, from its evidence and the store; finding ids
`plots.py`: the timeline, fan-in and uplink figures, and what every figure shares (`svg_of`, `Skip`)
`topology.py`: the leaf-spine drawing with a pause tree or deadlock cycle over it
"""
