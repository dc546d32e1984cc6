"""What a build reports: the build report, the precision benchmark, latency measurements.
"""
