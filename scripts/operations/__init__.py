"""Operating the served models: Prometheus alert rules, a Grafana dashboard, and a script that runs
a real Prometheus server scraping every Triton partition listed in run/manifest.json."""
