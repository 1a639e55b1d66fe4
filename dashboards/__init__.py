"""Grafana dashboards as code (grafanalib).

- `<name>.dashboard.py`: one dashboard each (fabric overview, training job, port drill-down, incident)
- `queries.py`: the SQL the panels share, names from the schema and the catalog
- `grafana.py`: panel, variable and annotation builders
- `build.py`: loads the dashboards, writes their JSON and Grafana provisioning (`build_all`)
"""
