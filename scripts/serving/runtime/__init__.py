"""Running the servers: tritonserver processes, partitions, the supervisor, CPU placement, security.
"""
