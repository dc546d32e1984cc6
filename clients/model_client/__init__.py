"""How to call the served models over HTTP or gRPC, as a library or from the command line."""
