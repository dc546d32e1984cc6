"""The recipes serving.toml names: how each model is built and installed into the repository.
"""
